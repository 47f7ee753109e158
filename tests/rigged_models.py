"""Tiny models rigged to sample one token first, for tests of what an engine does when that token comes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from model_adapters.registry import create_adapter
from model_adapters.tiny import ensure_tiny


def certain_next_token(tmp_path: Path, preset: str, kind: str, boost: float) -> tuple[Any, int]:
    """A copy of tiny ``preset`` whose next token is almost surely its first ``kind`` token (``stop`` or
    ``placeholder``): attention and MLP outputs are zeroed, so the last hidden state is the input token's
    embedding; embedding dimension 0 is large for every token and that token's output row reads it alone."""
    src = ensure_tiny(preset)
    adapter = create_adapter(str(src))
    token = (adapter.stop_token_ids if kind == "stop" else adapter.placeholder_token_ids)[0]
    model = adapter.load_model()
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith(("o_proj", "down_proj")):
                module.weight.zero_()
        model.get_input_embeddings().weight[:, 0] = 10.0
        out = model.get_output_embeddings().weight
        out[token] = 0.0
        out[token, 0] = boost
    folder = tmp_path / f"{preset}-{kind}-first"
    shutil.copytree(src, folder)
    model.save_pretrained(folder)
    return create_adapter(str(folder)), token
