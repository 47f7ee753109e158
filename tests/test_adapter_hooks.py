"""Interface hooks a new VLM family may need, on the real tiny families: the vision side's parameters, a
plugin's own tiny checkpoint, and a tiny tokenizer from a family spec that corl-vl does not ship."""

from __future__ import annotations

import pytest

from model_adapters import ModelAdapter, create_adapter, list_adapters
from model_adapters.tiny_tokenizer import SPECS, TokenizerSpec, build_tokenizer, token_ids


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
    assert "<picture>" not in {t for s in SPECS.values() for t in s.specials}
    tok = build_tokenizer(spec)
    picture, end = token_ids(tok, ["<picture>", "<end_turn>"])
    assert tok.image_token == "<picture>" and tok.eos_token_id == end
    assert tok("a <picture> b", add_special_tokens=False)["input_ids"].count(picture) == 1
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<turn>hi<end_turn>"
    )
