"""The generation cache is reused only when nothing that changes a response changed: decoding, model, prompt,
image preparation (--max-long-side), dtype, engine, device and batch size."""

from __future__ import annotations

import json

import pytest

from corl_vl.data.synth import generate_problems
from corl_vl.eval.generate import Decoding, Generator

GREEDY = Decoding(temperature=0.0, top_p=1.0, max_new_tokens=2, samples=1)


def _fingerprints(cache) -> list[str]:
    return [json.loads(line)["fingerprint"] for line in cache.read_text().splitlines()]


@pytest.mark.parametrize(
    "changed", [{"max_long_side": 256}, {"dtype": "bfloat16"}, {"batch_size": 1}], ids=lambda c: next(iter(c))
)
def test_cache_is_not_reused_across_settings_that_change_responses(tmp_path, changed):
    problems = generate_problems(1, seed=4)
    cache = tmp_path / "cache.jsonl"
    base = {"max_long_side": 1024, "dtype": "float32", "batch_size": 2}
    first = Generator("tiny-qwen2.5-vl", **base).generate(problems, GREEDY, cache, progress=False)
    again = Generator("tiny-qwen2.5-vl", **base).generate(problems, GREEDY, cache, progress=False)
    assert again == first and len(_fingerprints(cache)) == 1  # same settings: read back, nothing generated
    Generator("tiny-qwen2.5-vl", **{**base, **changed}).generate(problems, GREEDY, cache, progress=False)
    prints = _fingerprints(cache)
    assert len(prints) == 2 and prints[0] != prints[1]  # generated afresh under its own fingerprint
