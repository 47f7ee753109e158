"""benchmarks/gpu/validate.py: the plan for a described machine (dry run: what runs, what is skipped and why,
the estimated time), the CPU subset of the HF sections writing its JSON and Markdown, and the vLLM and torchrun
sections where their packages are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU_DIR))

import sections  # noqa: E402
import validate  # noqa: E402

HF_ONLY = ["pair_memory", "placement", "logprob_tail", "lora", "throughput", "hf_drift"]
H200 = sections.ENVIRONMENTS["h200-image"]
ALL_CODE = frozenset(
    sections.CODE
)  # a checkout with issue #23's presets, placement and LoRA, and their checks


def test_h200_image_with_the_full_size_presets_runs_the_hf_sections_within_8_minutes():
    plan = sections.make_plan(H200, ALL_CODE, sections.BY_NAME, budget_s=480)
    assert [s.name for s in plan.run] == HF_ONLY
    assert plan.estimate_s <= 480
    reasons = {s["section"]: s["reason"] for s in plan.skipped}
    assert reasons == {
        "sync": "needs vllm (not installed)",
        "drift": "needs vllm (not installed)",
        "torchrun": "needs deepspeed (not installed)",
        "uneven_placement": "needs deepspeed (not installed)",
        "tp_rollout": "needs deepspeed, vllm (not installed)",
    }
    text = sections.describe(plan, H200, 480)
    assert "would run:" in text and "torchrun         needs deepspeed" in text and "of a 480 s budget" in text


def test_this_checkout_names_what_each_gpu_section_still_lacks():
    plan = sections.make_plan(H200, sections.code_here(), sections.BY_NAME, budget_s=480)
    reasons = {s["section"]: s["reason"] for s in plan.skipped}
    # the full-size presets, placement and LoRA are here (issue #23)
    assert [s.name for s in plan.run] == [
        "pair_memory",
        "placement",
        "logprob_tail",
        "lora",
        "throughput",
        "hf_drift",
    ]
    assert set(reasons) == {
        "sync",
        "drift",
        "torchrun",
        "uneven_placement",
        "tp_rollout",
    }


def test_sections_and_budget_choose_and_cut_and_shared_runs_cost_once():
    plan = sections.make_plan(H200, ALL_CODE, ["hf_drift", "throughput", "pair_memory"], budget_s=200)
    assert [s.name for s in plan.run] == [
        "pair_memory",
        "throughput",
    ]  # throughput rides on pair_memory's runs
    assert plan.estimate_s == sections.BY_NAME["pair_memory"].estimate_s
    reasons = {s["section"]: s["reason"] for s in plan.skipped}
    assert reasons["hf_drift"].startswith("over --budget-s 200") and reasons["lora"] == "not in --sections"
    alone = sections.make_plan(H200, ALL_CODE, ["throughput"], budget_s=480)
    assert alone.estimate_s == sections.BY_NAME["throughput"].estimate_s > 0
    with pytest.raises(SystemExit, match="unknown nope"):
        sections.make_plan(H200, ALL_CODE, ["nope"], budget_s=480)


def test_a_machine_described_in_a_file(tmp_path, capsys):
    described = tmp_path / "node.json"
    described.write_text(
        json.dumps(
            {
                "name": "2 × A100",
                "gpus": 2,
                "gpu_memory_gib": 40,
                "packages": ["torch", "transformers", "deepspeed"],
            }
        )
    )
    assert validate.main(["--dry-run", "--env", str(described)]) == 0
    out = capsys.readouterr().out
    assert "2 × A100: 2 GPU(s) × 40 GiB" in out
    assert "pair_memory      needs ≥ 80 GiB per GPU, has 40" in out
    assert "torchrun         ≈" in out  # DeepSpeed and 2 GPUs: the torchrun section would run
    described.write_text("{}")
    with pytest.raises(SystemExit, match="needs JSON with gpus"):
        validate.main(["--dry-run", "--env", str(described)])


def test_without_a_gpu_the_hf_sections_plan_their_tiny_subset():
    cpu = sections.Environment("cpu", 0, 0.0, frozenset({"torch", "transformers"}))
    plan = sections.make_plan(cpu, sections.code_here(), sections.BY_NAME, budget_s=1800)
    assert [s.name for s in plan.run] == ["pair_memory", "logprob_tail", "throughput", "hf_drift"]
    assert sections.payload_models("hf_drift", on_gpu=False) == sections.TINY_FAMILIES
    assert sections.payload_models("pair_memory", on_gpu=True) == (
        "qwen2.5-vl-3b@random",
        "internvl3.5-2b@random",
    )


def test_the_logprob_tail_check_backpropagates_through_a_real_vocabulary_head():
    import checks_hf

    result = checks_hf.logprob_tail(batch=2, tokens=16, vocab=32_000, hidden=256, dtype="float32")
    assert result["ok"] and result["vocab"] == 32_000
    assert result["peak_above_model_gib"] is None  # a CUDA counter: not measured on CPU


def test_the_dry_run_for_the_h200_image_lists_the_placement_check(capsys):
    assert validate.main(["--dry-run", "--env", "h200-image"]) == 0
    out = capsys.readouterr().out
    running = out.split("would run:")[1].split("skipped:")[0]
    assert "placement        ≈   90 s  both agents of the pair time-shared on one GPU" in running


@pytest.mark.slow  # two tiny VLM agents, two real steps on one injected device
def test_the_placement_check_runs_the_tiny_pair_in_turns_on_cpu():
    import checks_place

    result = checks_place.placement(list(sections.TINY_PAIR), dtype="float32", max_new_tokens=4, steps=1)
    assert result["ok"] and result["lanes"] == [[0, 1]]
    assert set(result["offloaded_gib"]) == {"agent0", "agent1"} and min(result["offloaded_gib"].values()) > 0
    assert [len(t) for t in result["turns"].values()] == [1, 1]
    assert result["idle_gib"] == [None] and result["plan"] is None  # CUDA counters: not on CPU
    assert "lanes [[0, 1]]" in validate.details("placement", result)


def test_the_table_shows_errors_in_one_line_and_names_skipped_models():
    rows = [
        {"section": "drift", "label": "tiny-x", "ok": False, "error": "Traceback ...\nValueError: bad dtype"}
    ]
    skips = [
        {"section": "torchrun", "checks": "…", "reason": "no GPU"},
        {"section": "drift", "label": "gemma-3-4b", "reason": "weights not in the local HF cache"},
    ]
    text = validate.markdown(rows, skips, "# t")
    assert "| drift | tiny-x | NO |  | ERROR ValueError: bad dtype |" in text
    assert "| torchrun |  | skipped | | no GPU |" in text
    assert "| drift | gemma-3-4b | skipped | | weights not in the local HF cache |" in text


@pytest.mark.slow  # two tiny agents, two real training steps each, in subprocesses
def test_cpu_subset_of_the_memory_sections_writes_json_and_markdown(tmp_path, capsys):
    code = validate.main(["--sections", "pair_memory,throughput", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    report = json.loads(next(tmp_path.glob("*-cpu.json")).read_text())
    assert code == 0 and report["ok"], printed
    rows = {(r["section"], r["label"]): r for r in report["results"]}
    assert set(rows) == {(s, m) for s in ("pair_memory", "throughput") for m in sections.TINY_PAIR}
    for model in sections.TINY_PAIR:
        memory, speed = rows["pair_memory", model], rows["throughput", model]
        assert memory["seconds"] == speed["seconds"]  # one run serves both sections
        assert memory["peak_memory_gib"] is None and memory["update_skipped"] == [0.0, 0.0]
        assert speed["rollout_tokens_per_s"] > 0 and speed["update_tokens_per_s"] > 0
        assert "error" in memory["plan"]  # no `corl-vl plan` in this checkout: said, not invented
    table = next(tmp_path.glob("*-cpu.md")).read_text()
    assert table.strip() in printed and "| pair_memory | tiny-qwen2.5-vl | yes |" in table
    assert "| hf_drift |  | skipped | | not in --sections |" in table
    assert next(tmp_path.glob("*-cpu.json")).stat().st_size < 1024 * 1024


@pytest.mark.vllm
def test_vllm_sections_run_end_to_end_on_cpu(tmp_path, capsys):
    code = validate.main(
        [
            "--sections",
            "sync,drift,torchrun",
            "--cohort-model",
            "tiny-qwen2.5",
            "--families",
            "tiny-llama3",
            "--out",
            str(tmp_path),
        ]
    )
    printed = capsys.readouterr().out
    report = json.loads(next(tmp_path.glob("*-cpu.json")).read_text())
    assert code == 0 and report["ok"], printed
    sync, drift = report["results"]
    assert sync["order_ok"] and sync["parity_max_abs_nats"] <= 1e-3 and sync["rollout_tokens_per_s"] > 0
    assert drift["model"] == "tiny-llama3" and drift["tokens"] > 0 and drift["mean_nats"] < 1e-3
    assert {s["section"]: s["reason"] for s in report["skipped"]}["torchrun"] == "needs 2 GPU(s), has 0"
    assert "PASS" in printed


@pytest.mark.distributed
def test_the_torchrun_check_trains_resumes_and_logs_every_step_on_gloo():
    import checks

    result = checks.torchrun_zero3(["tiny-qwen2.5", "tiny-llama3"], backend="gloo", steps=2)
    assert result["ok"], result.get("error")
    assert result["steps_logged"] == {"agent0": [0, 1, 2], "agent1": [0, 1, 2]}
