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

import checks_turns  # noqa: E402
import sections  # noqa: E402
import validate  # noqa: E402

HF_ONLY = ["pair_memory", "pair_turns", "logprob_tail", "lora", "throughput", "hf_drift"]
H200 = sections.ENVIRONMENTS["h200-image"]
ALL_CODE = frozenset(
    sections.CODE
)  # a checkout with issue #23's presets and LoRA, issue #39's process model, and their checks


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
    # the full-size presets, LoRA (issue #23) and the process model (issue #39) are here
    assert [s.name for s in plan.run] == HF_ONLY
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
    cpu_subset = ["pair_memory", "pair_turns", "logprob_tail", "throughput", "hf_drift"]
    assert [s.name for s in plan.run] == cpu_subset
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


def test_the_dry_run_for_the_h200_image_lists_the_pair_turns_check_within_the_budget(capsys):
    assert validate.main(["--dry-run", "--env", "h200-image"]) == 0
    out = capsys.readouterr().out
    running = out.split("would run:")[1].split("skipped:")[0]
    assert "pair_turns       ≈  110 s  the pair as `corl-vl train` runs it on one GPU" in running
    assert "placement  " not in out  # the one-process layout is no longer the GPU's
    assert "estimated total: 480 s of a 480 s budget" in out


def test_the_pair_turns_check_launches_corl_vl_train_as_it_starts_itself_on_one_gpu(tmp_path):
    cmd = checks_turns.launch_command(tmp_path / "c.yaml", tmp_path)
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert cmd[5:9] == [str(checks_turns.WORKER), str(tmp_path), "--no-checkpoint", "--"]
    assert cmd[9:] == ["train", "--config", str(tmp_path / "c.yaml"), "--no-progress"]
    (_, _, payload), *_ = validate.jobs("pair_turns", None, on_gpu=True)[0]
    assert payload["models"] == [m + sections.RANDOM_SUFFIX for m in sections.PAIR]
    size = (payload["dtype"], payload["k"], payload["max_new_tokens"], payload["steps"])
    assert size == ("bfloat16", 2, 64, 2)


def _turn_records(backend: str = "nccl") -> tuple[list[dict], list[str], dict]:
    """Two processes' records of a good 1-step run, its turns log and its metrics."""
    plane = {"exchanges": 3, "bytes": 90, "purposes": {}, "order": ["node names", "answers", "a barrier"]}
    device = "cuda" if backend == "nccl" else "cpu"
    ranks = [
        {
            "agent": f"agent{r}",
            "takes_turns": True,
            "shares_gpu_with": [0, 1],
            "exit_code": 0,
            "control_plane": {**plane, "not_plain": []},
            "agent_world": {"backend": backend, "size": 1, "tensor_collectives": {f"all_reduce:{device}": 2}},
            "offload": {"offloads": 2, "reloads": 1, "moved_gib": 3.5},
        }
        for r in (0, 1)
    ]
    log = [f"{w} {r} {label}" for r, label in checks_turns.expected_turns(1) for w in ("enter", "exit")]
    metrics = {f"agent{r}": [{"step": 0, "update/skipped": 0.0}] for r in (0, 1)}
    return ranks, log, metrics


def test_the_pair_turns_verdict_needs_turns_in_order_json_only_and_tensors_on_the_agents_device():
    judge = checks_turns.judge_turns
    ranks, log, metrics = _turn_records()
    good = judge(ranks, log, metrics, 1, backend="nccl")
    assert good["ok"] and good["turns"][:3] == ["0:build", "1:build", "0:rollout 0"]
    overlap = [log[0], log[2], log[1], log[3], *log[4:]]  # rank 1 entered while rank 0 built
    assert not judge(ranks, overlap, metrics, 1, backend="nccl")["turns_in_order"]
    swapped = [*log[:4], *log[6:8], *log[4:6], *log[8:]]  # rank 1's rollout before rank 0's
    assert not judge(ranks, swapped, metrics, 1, backend="nccl")["ok"]
    ranks[1]["control_plane"]["not_plain"] = ["answers: Tensor"]
    assert not judge(ranks, log, metrics, 1, backend="nccl")["control_plane_json_only"]
    ranks, log, metrics = _turn_records()
    ranks[0]["agent_world"]["tensor_collectives"]["broadcast:cpu"] = 1  # a CPU tensor into the NCCL world
    assert not judge(ranks, log, metrics, 1, backend="nccl")["tensors_on_agent_device"]
    ranks, log, metrics = _turn_records("gloo")
    assert not judge(ranks, log, metrics, 1, backend="nccl")["agent_worlds_ok"]
    assert judge(ranks, log, metrics, 1, backend="gloo")["ok"]
    metrics["agent1"][0]["update/skipped"] = 1.0
    assert not judge(ranks, log, metrics, 1, backend="gloo")["ok"]
    ranks, log, metrics = _turn_records()
    ranks[0]["offload"]["reloads"] = 0  # the update ran without its state brought back
    assert not judge(ranks, log, metrics, 1, backend="nccl")["offload_ok"]


def test_the_pair_turns_memory_sits_next_to_the_plan_for_the_full_size_pair():
    from corl_vl.config import config_from_dict

    models = [m + sections.RANDOM_SUFFIX for m in sections.PAIR]
    raw = checks_turns.pair_config(
        models, Path("/nonexistent"), dtype="bfloat16", problems=2, k=2, max_new_tokens=64, steps=2
    )
    plan = checks_turns.plan_summary(config_from_dict(raw, "pair_turns"), 139 * 2**30)
    assert plan["fits"] and 0 < plan["device_peak_gib"] < 139
    assert set(plan["per_agent_gib"]) == {"agent0", "agent1"}
    turn = {
        "label": "update 0",
        "peak_allocated_gib": 50.0,
        "peak_reserved_gib": 55.0,
        "end_reserved_gib": 20.0,
    }
    ranks = [
        {
            "agent": f"agent{r}",
            "peak_allocated_gib": 50.0 - r,
            "peak_reserved_gib": 56.0,
            "device_name": "H200",
            "turns": [{**turn, "device_used_gib": 40.0 + r}],
        }
        for r in (0, 1)
    ]
    memory = checks_turns.memory_summary(ranks)
    assert memory["device_peak_gib"] == 76.0  # 41 used at rank 1's turn end + the 35 it released by then
    result = {**checks_turns.judge_turns(*_turn_records(), 1, backend="nccl"), "self_launch_processes": 2}
    cell = validate.details("pair_turns", {**result, "memory": memory, "plan": plan})
    assert 'peak allocated per agent {"agent0": 50.0, "agent1": 49.0} GiB, GPU ≈ 76.0 GiB' in cell
    assert f"plan: {plan['device_peak_gib']} GiB" in cell


@pytest.mark.distributed
@pytest.mark.slow  # torchrun, two processes with one tiny VLM agent each, two real steps
def test_the_pair_turns_section_runs_the_tiny_pair_as_two_processes_taking_turns_on_cpu(tmp_path, capsys):
    code = validate.main(["--sections", "pair_turns", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    report = json.loads(next(tmp_path.glob("*-cpu.json")).read_text())
    assert code == 0 and report["ok"], printed
    (result,) = report["results"]
    assert result["models"] == list(sections.TINY_PAIR) and result["self_launch_processes"] == 2
    assert result["backend"] == ["gloo"] and result["agent_worlds_ok"]  # each agent its own world
    assert result["turns"] == [f"{r}:{label}" for r, label in checks_turns.expected_turns(2)]
    assert result["control_plane_json_only"] and result["control_plane_exchanges"] > 0
    assert result["steps_logged"] == {"agent0": [0, 1], "agent1": [0, 1]}
    assert result["checkpoints_skipped"] == [1, 1] and result["memory"] is None  # CUDA counters: not on CPU
    assert result["offload_ok"] and set(result["offloaded_gib"]) == {"agent0", "agent1"}
    assert "2 processes, gloo agent worlds, 10 turns in order: True" in printed


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

    result = checks.torchrun_zero3(["tiny-qwen2.5", "tiny-llama3"], backend="gloo", steps=1)
    assert result["ok"], result.get("error")
    assert result["steps_logged"] == {"agent0": [0, 1], "agent1": [0, 1]}  # 1 step, then 1 resumed
