"""benchmarks/gpu/validate.py: its CPU subset runs (the same checks a GPU run does, on tiny models) and says
what it skipped; on a GPU machine it plans the real-weight drift and the 2-GPU torchrun check."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU_DIR))

import validate  # noqa: E402


def _args(**over):
    base = {"sections": "sync,drift,torchrun", "cohort_model": "tiny-qwen2.5-vl", "cohort_dtype": "float32", "families": None, "dtype": None,
            "torchrun_models": "tiny-qwen2.5,tiny-llama3", "torchrun_backend": "nccl"}  # fmt: skip
    return argparse.Namespace(**{**base, **over})


def test_a_gpu_machine_plans_real_weights_and_skips_what_is_not_there(monkeypatch):
    monkeypatch.setattr(validate, "weights_present", lambda preset: preset == "qwen2.5-vl-3b")
    todo, skipped = validate.plan(_args(), gpus=1)
    assert [(c, label) for c, label, _ in todo] == [("sync", "tiny-qwen2.5-vl"), ("drift", "qwen2.5-vl-3b")]
    assert todo[1][2] == {"model": "qwen2.5-vl-3b", "dtype": "bfloat16"}
    reasons = {s["check"]: s["reason"] for s in skipped}
    assert reasons["drift gemma-3-4b"] == "weights not in the local HF cache"
    assert "needs 2" in reasons["torchrun ZeRO-3 + resume"]
    todo, _ = validate.plan(_args(), gpus=2)
    assert todo[-1] == ("torchrun", "tiny-qwen2.5+tiny-llama3", {"models": ["tiny-qwen2.5", "tiny-llama3"],
                                                                  "backend": "nccl"})  # fmt: skip


def test_without_a_gpu_the_plan_is_the_tiny_subset_and_names_every_skip():
    todo, skipped = validate.plan(_args(), gpus=0)
    assert [label for c, label, _ in todo if c == "drift"] == list(validate.TINY_FAMILIES)
    assert all(p["dtype"] == "float32" for c, _, p in todo if c == "drift")
    checks = [s["check"] for s in skipped]
    assert [f"drift {f}" for f in validate.REAL_FAMILIES] == [c for c in checks if c.startswith("drift")]
    assert "torchrun ZeRO-3 + resume" in checks and "vLLM sleep mode" in checks


def test_the_table_shows_errors_in_one_line():
    rows = [
        {"check": "drift", "label": "tiny-x", "ok": False, "error": "Traceback ...\nValueError: bad dtype"}
    ]
    text = validate.table(rows, [{"check": "torchrun", "reason": "no GPU"}])
    assert "ERROR ValueError: bad dtype" in text and "skipped: torchrun" in text


@pytest.mark.vllm
def test_cpu_subset_runs_end_to_end_and_writes_the_result_file(tmp_path, capsys):
    out = tmp_path / "result.json"
    code = validate.main(["--sections", "sync,drift,torchrun", "--cohort-model", "tiny-qwen2.5", "--families",
                          "tiny-llama3", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert code == 0 and report["ok"], printed
    sync, drift = report["results"]
    assert sync["order_ok"] and sync["parity_max_abs_nats"] <= 1e-3 and sync["rollout_tokens_per_s"] > 0
    assert drift["model"] == "tiny-llama3" and drift["tokens"] > 0 and drift["mean_nats"] < 1e-3
    assert {s["check"] for s in report["skipped"]} >= {"torchrun ZeRO-3 + resume", "vLLM sleep mode"}
    assert "verdict: PASS" in printed and "skipped: torchrun" in printed


@pytest.mark.distributed
def test_the_torchrun_check_trains_resumes_and_logs_every_step_on_gloo():
    import checks

    result = checks.torchrun_zero3(["tiny-qwen2.5", "tiny-llama3"], backend="gloo", steps=2)
    assert result["ok"], result.get("error")
    assert result["steps_logged"] == {"agent0": [0, 1, 2], "agent1": [0, 1, 2]}
