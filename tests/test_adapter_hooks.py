"""Interface hooks a new VLM family may need, on the real tiny families: the vision side's parameters, a
plugin's own tiny checkpoint, and a tiny tokenizer from a family spec that corl-vl does not ship."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from model_adapters import ModelAdapter, create_adapter, list_adapters, tiny_tokenizer
from model_adapters.tiny import tiny_recipes
from model_adapters.tiny_tokenizer import TokenizerSpec, build_tokenizer, token_ids


@pytest.mark.parametrize(
    ("name", "prefixes"),
    [
        ("tiny-qwen2.5-vl", ("model.visual.",)),
        ("tiny-qwen3-vl", ("model.visual.",)),
        ("tiny-internvl3.5", ("model.vision_tower.", "model.multi_modal_projector.")),
        ("tiny-gemma3", ("model.vision_tower.", "model.multi_modal_projector.")),
        ("tiny-qwen2.5", ()),
    ],
)
def test_vision_parameter_names_are_the_tower_and_projector(name, prefixes):
    adapter = create_adapter(name)
    model = adapter.load_model()
    expected = [n for n, _ in model.named_parameters() if n.startswith(prefixes)] if prefixes else []
    assert adapter.vision_parameter_names(model) == expected


def test_builtin_families_give_their_tiny_model_through_the_hook_as_plugins_do():
    """A built-in family registers as a plug-in does: its class's hook names a tiny folder the family drives."""
    from model_adapters.builtins import BUILTINS
    from model_adapters.registry import adapter_origin, detect_adapter

    builtins = {n: c for n, c in list_adapters().items() if adapter_origin(n) == "built-in"}
    assert {c.__module__.rsplit(".", 1)[0] for c in builtins.values()} == set(BUILTINS)
    for name, cls in builtins.items():
        assert detect_adapter(cls.tiny_checkpoint()) == name
    assert ModelAdapter.tiny_checkpoint(seed=3) is None


def test_build_tokenizer_takes_a_spec_of_a_family_corl_vl_does_not_ship():
    spec = TokenizerSpec(
        specials=("<|endoftext|>", "<turn>", "<end_turn>", "<picture>"),
        bos="<turn>",
        eos="<end_turn>",
        pad="<|endoftext|>",
        chat_template="{% for m in messages %}<turn>{{ m['content'] }}<end_turn>{% endfor %}",
        named={"image_token": "<picture>"},
    )
    assert "<picture>" not in {t for r in tiny_recipes().values() for t in r.tokenizer.specials}
    tok = build_tokenizer(spec)
    picture, end = token_ids(tok, ["<picture>", "<end_turn>"])
    assert tok.image_token == "<picture>" and tok.eos_token_id == end
    assert tok("a <picture> b", add_special_tokens=False)["input_ids"].count(picture) == 1
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<turn>hi<end_turn>"
    )


def test_each_built_in_family_declares_its_tokenizer_in_its_own_folder():
    """Adding a family never edits the shared builder: every tiny recipe's spec is a name in its family's
    ``tiny.py``, and model_adapters/tiny_tokenizer.py names none of their special tokens."""
    shared = Path(tiny_tokenizer.__file__).read_text()
    for name, recipe in tiny_recipes().items():
        family = sys.modules[recipe.build.__module__]
        assert any(value is recipe.tokenizer for value in vars(family).values()), name
        assert family.__name__.startswith("model_adapters.") and family.__name__.endswith(".tiny"), name
        assert [t for t in recipe.tokenizer.specials if t in shared] == [], name
