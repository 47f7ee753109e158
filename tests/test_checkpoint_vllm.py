"""A trained checkpoint's agent folder is a model folder vLLM loads (``LLM(model=latest/<agent>)``), for a VLM
and a text agent; ``eval --model RUN``, ``diagnose``, the model extractor and rephrasing run on it with
``--engine vllm`` and leave no vLLM sync folder behind."""

from __future__ import annotations

import gc
import json
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from pathlib import Path

import pytest
from test_checkpoint import _builder, _config
from test_diagnose_generate import _problems_file
from test_eval_runs import _wemath_group

from corl_vl.cli import main
from corl_vl.config import apply_overrides
from corl_vl.data import to_text_problem
from corl_vl.data.synth import generate_problems
from corl_vl.recipe import train
from model_adapters import create_adapter

pytestmark = pytest.mark.vllm

AGENTS = {"qwen": True, "text": False}  # agent → reads images


@pytest.fixture(scope="module")
def vlm_and_text_run(tmp_path_factory) -> Path:
    """A tiny Qwen2.5-VL and a tiny text Qwen2 trained one step together."""
    run = tmp_path_factory.mktemp("vllm-ckpt") / "run"
    overrides = [
        "train.max_steps=1",
        "train.save_every=1",
        "agents.internvl.model=tiny-qwen2.5",
        "agents.internvl.name=text",
    ]
    train(apply_overrides(_config(run), overrides), progress=False, prepare=_builder())
    return run


@pytest.mark.parametrize("agent", AGENTS)
def test_vllm_loads_the_latest_agent_folder(vlm_and_text_run, agent):
    from vllm import LLM, SamplingParams

    folder = vlm_and_text_run / "checkpoints" / "latest" / agent
    adapter = create_adapter(str(folder))
    assert bool(adapter.supports_images) == AGENTS[agent]
    problem = generate_problems(1, seed=3)[0]
    if not adapter.supports_images:
        problem = to_text_problem(problem)
    llm = LLM(
        model=str(folder),
        enforce_eager=True,
        max_model_len=1024,
        kv_cache_memory_bytes=256 << 20,
        limit_mm_per_prompt={"image": 1 if AGENTS[agent] else 0},
    )
    try:
        request = adapter.vllm_request(adapter.encode_prompt(problem))
        out = llm.generate([request], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    finally:
        del llm
        gc.collect()
    assert len(out[0].outputs[0].token_ids) >= 1


def test_eval_and_diagnose_with_vllm_on_a_run(vlm_and_text_run, fixtures_dir, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CORL_VL_CACHE", str(cache))  # the engines' sync folders go here
    data = _wemath_group(fixtures_dir, tmp_path)
    argv = [
        "eval",
        "--model",
        str(vlm_and_text_run),
        "--engine",
        "vllm",
        "--benchmark",
        "wemath",
        "--data",
        str(data),
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--no-progress",
        "--output-dir",
        str(tmp_path / "eval"),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert "qwen-step1/wemath: overall" in capsys.readouterr().out

    problems = tmp_path / "problems.jsonl"
    _problems_file(problems, 2)
    latest = vlm_and_text_run / "checkpoints" / "latest"
    argv = [
        "diagnose",
        "--model",
        str(latest / "qwen"),
        "--model",
        str(latest / "text"),
        "--engine",
        "vllm",
        "--data",
        str(problems),
        "--max-new-tokens",
        "4",
        "--output-dir",
        str(tmp_path / "diag"),
        "--json",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["n"] == 2

    responses = tmp_path / "r.jsonl"  # the model extractor, loaded once per eval command
    responses.write_text(json.dumps({"id": "1", "response": "so $d$ is 1.20 m"}) + "\n")
    argv = [
        "eval",
        "--benchmark",
        "mathvista",
        "--data",
        str(fixtures_dir / "eval" / "mathvista" / "testmini.json"),
        "--responses",
        str(responses),
        "--extractor",
        f"model:{latest / 'text'}",
        "--engine",
        "vllm",
        "--output-dir",
        str(tmp_path / "extracted"),
        "--no-progress",
    ]
    assert main(argv) == 0, capsys.readouterr().err

    from corl_vl.eval.rephrase import rephrase

    problems = [to_text_problem(p) for p in generate_problems(1, seed=5)]
    assert len(rephrase(problems, str(latest / "text"), engine="vllm", max_new_tokens=4).problems) == 1
    assert not list(cache.glob("vllm-sync-*"))  # every engine was closed
