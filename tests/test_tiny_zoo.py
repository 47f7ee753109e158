"""The tiny model zoo: every tiny preset is a real, reloadable, trainable checkpoint of its family.

Each family is built in memory and compared with the cached folder from ``ensure_tiny`` (the save → reload path
every other test relies on), then generated from (with an image for VLMs) and back-propagated through.
"""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from corl_vl.cli import main as cli_main
from corl_vl.errors import CorlError
from model_adapters.checkpoint_info import count_parameters
from model_adapters.presets import all_presets
from model_adapters.tiny import build_tiny, ensure_tiny, make_tiny, tiny_recipes

TINY = [name for name, preset in all_presets().items() if preset.tiny]
VLMS = {"tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-qwen3-vl", "tiny-qwen3-vl-moe"}
# The first parameter images flow through: a non-zero gradient here means the whole vision tower gets gradients.
PATCH_EMBED = {
    "tiny-qwen2.5-vl": "model.visual.patch_embed.proj.weight",
    "tiny-internvl3.5": "model.vision_tower.embeddings.patch_embeddings.projection.weight",
    "tiny-gemma3": "model.vision_tower.embeddings.patch_embedding.weight",
    "tiny-qwen3-vl": "model.visual.patch_embed.proj.weight",
    "tiny-qwen3-vl-moe": "model.visual.patch_embed.proj.weight",
}
PROCESSOR_CLASS = {
    "tiny-qwen2.5-vl": "Qwen2_5_VLProcessor",
    "tiny-internvl3.5": "InternVLProcessor",
    "tiny-gemma3": "Gemma3Processor",
    "tiny-qwen3-vl": "Qwen3VLProcessor",
    "tiny-qwen3-vl-moe": "Qwen3VLProcessor",
}


def _image(seed: int, size: tuple[int, int]) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())


def _messages(name: str, image: Image.Image | None) -> list[dict]:
    text = {"type": "text", "text": "How many circles are there? Put the answer in \\boxed{}."}
    content = [{"type": "image", "image": image}, text] if name in VLMS else [text]
    return [{"role": "user", "content": content}]


def _inputs(name: str, processor) -> dict:
    """Chat-templated, tokenized inputs (one image for VLMs), as a rollout would build them."""
    image = _image(0, (96, 72)) if name in VLMS else None
    return processor.apply_chat_template(
        _messages(name, image),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )


def _auto_classes(name: str):
    import transformers

    model_cls = tiny_recipes()[name].auto_class
    proc_cls = "AutoProcessor" if name in VLMS else "AutoTokenizer"
    return getattr(transformers, model_cls), getattr(transformers, proc_cls)


@pytest.fixture(scope="module", params=TINY)
def family(request):
    """(name, in-memory model, its processor, cached folder, folder reloaded with the Auto classes)."""
    name = request.param
    model, processor = make_tiny(name, seed=0)
    path = ensure_tiny(name, seed=0)
    auto_model, auto_proc = _auto_classes(name)
    loaded = auto_model.from_pretrained(path, dtype=torch.float32).eval()
    return name, model, processor, path, loaded, auto_proc.from_pretrained(path)


def test_reload_gives_identical_logits_and_inputs(family):
    name, model, processor, _, loaded, loaded_proc = family
    inputs = _inputs(name, processor)
    reloaded_inputs = _inputs(name, loaded_proc)
    assert inputs.keys() == reloaded_inputs.keys()
    for key in inputs:
        assert torch.equal(inputs[key], reloaded_inputs[key]), key
    if name in VLMS:
        assert type(loaded_proc).__name__ == PROCESSOR_CLASS[name]
        image_id = loaded.config.image_token_id if hasattr(loaded.config, "image_token_id") else None
        image_id = image_id if image_id is not None else loaded.config.image_token_index
        n_image = int((inputs["input_ids"] == image_id).sum())
        assert 4 <= n_image <= 64, n_image  # small images → a few dozen tokens at most
    with torch.no_grad():
        expected = model(**inputs).logits
        got = loaded(**reloaded_inputs).logits
    assert expected.shape[-1] == len(loaded_proc.tokenizer if name in VLMS else loaded_proc)
    assert torch.equal(expected, got)


def test_size_heads_and_special_ids(family):
    name, _, _, path, loaded, proc = family
    assert count_parameters(path) == sum(p.numel() for p in loaded.parameters())
    assert count_parameters(path) <= 20_000_000
    cfg = loaded.config
    text = cfg.get_text_config()
    assert (getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads) >= 32
    vision = getattr(cfg, "vision_config", None)
    if vision is not None:
        heads = getattr(vision, "num_heads", None) or vision.num_attention_heads
        assert vision.hidden_size // heads >= 32
    assert not cfg.tie_word_embeddings and not text.tie_word_embeddings
    emb = loaded.get_input_embeddings().weight
    assert emb.data_ptr() != loaded.get_output_embeddings().weight.data_ptr()
    assert not torch.equal(emb, loaded.get_output_embeddings().weight)
    tok = proc.tokenizer if name in VLMS else proc
    assert text.eos_token_id == tok.eos_token_id and text.pad_token_id == tok.pad_token_id
    assert text.bos_token_id is not None
    assert tok.eos_token_id in loaded.generation_config.eos_token_id
    assert next(loaded.parameters()).dtype == torch.float32
    assert 1000 <= len(tok) <= 8192
    # The tokenizer round-trips math text exactly.
    math = "Therefore $\\frac{12}{5} + 3 = \\boxed{5.4}$"
    assert tok.decode(tok(math, add_special_tokens=False).input_ids) == math


def test_generates_and_backpropagates(family):
    name, model, processor, _, _, _ = family
    inputs = _inputs(name, processor)
    prompt_len = inputs["input_ids"].shape[1]
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False, min_new_tokens=4)
    assert out.shape == (1, prompt_len + 4)
    assert torch.equal(out[:, :prompt_len], inputs["input_ids"])

    model.train()
    model.zero_grad(set_to_none=True)
    labels = out.clone()
    full = dict(inputs)
    full["input_ids"] = out
    full["attention_mask"] = torch.ones_like(out)
    if "mm_token_type_ids" in full:
        full["mm_token_type_ids"] = torch.nn.functional.pad(full["mm_token_type_ids"], (0, 4))
    if "token_type_ids" in full:
        full["token_type_ids"] = torch.nn.functional.pad(full["token_type_ids"], (0, 4))
    loss = model(**full, labels=labels).loss
    loss.backward()
    model.eval()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["lm_head.weight"].abs().sum() > 0
    embed = model.get_input_embeddings().weight.grad
    assert embed is not None and embed.abs().sum() > 0
    if name in VLMS:
        patch = grads[PATCH_EMBED[name]]
        assert patch is not None and patch.abs().sum() > 0


def test_same_seed_same_bytes_other_seed_differs(family, tmp_path):
    name, _, _, path, _, _ = family
    cached = (path / "model.safetensors").read_bytes()
    again = build_tiny(name, tmp_path / "s0", seed=0)
    other = build_tiny(name, tmp_path / "s1", seed=1)
    assert (again / "model.safetensors").read_bytes() == cached
    assert (other / "model.safetensors").read_bytes() != cached
    assert (again / "tokenizer.json").read_text() == (path / "tokenizer.json").read_text()


def test_unknown_tiny_name_lists_tiny_models():
    with pytest.raises(CorlError, match=r"unknown tiny model 'tiny-nope'; tiny models: ") as err:
        ensure_tiny("tiny-nope")
    assert all(name in str(err.value) for name in TINY)


def test_cli_models_list_and_build(tmp_path, capsys):
    assert cli_main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {row["name"] for row in listed} == set(all_presets())
    assert cli_main(["models", "list"]) == 0
    table = capsys.readouterr().out
    for name in all_presets():
        assert name in table
    assert "Qwen/Qwen2.5-VL-3B-Instruct" in table
    assert (
        cli_main(["models", "build-tiny", "tiny-qwen2.5", "--out", str(tmp_path / "m"), "--seed", "3"]) == 0
    )
    out = capsys.readouterr().out
    assert f"{count_parameters(tmp_path / 'm'):,}" in out
    assert (tmp_path / "m" / "model.safetensors").exists()
    assert cli_main(["models", "build-tiny", "tiny-nope", "--out", str(tmp_path / "x")]) == 2


def test_ensure_tiny_is_safe_when_two_builders_race(tmp_path, monkeypatch):
    """Two builders of the same missing preset at once both get one complete folder, with no leftovers."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("CORL_VL_CACHE", str(tmp_path))
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: ensure_tiny("tiny-qwen2.5"), range(2)))
    assert paths[0] == paths[1] and paths[0].parent == tmp_path / "tiny"
    assert os.listdir(tmp_path / "tiny") == [paths[0].name]
    monkeypatch.delenv("CORL_VL_CACHE")
    reference = ensure_tiny("tiny-qwen2.5")
    assert reference.parent != paths[0].parent
    assert (paths[0] / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
