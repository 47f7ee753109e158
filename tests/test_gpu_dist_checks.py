"""benchmarks/gpu's multi-GPU sections (uneven_placement, tp_rollout): where the plan runs them and where it skips
them by name, the torchrun line they launch, and their verdicts on worked examples. Both checks also run end to
end on gloo (the backend the worker's config picks without a GPU; the TP check with the HF engine, as vLLM TP
needs GPUs) in tests/test_multinode.py, whose multi-node launches are compared against those very runs."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

GPU_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU_DIR))

import checks_dist  # noqa: E402
import sections  # noqa: E402
import validate  # noqa: E402

MULTI = ["torchrun", "uneven_placement", "tp_rollout"]
PACKAGES = ["torch", "transformers", "deepspeed", "vllm"]


def _h100s(tmp_path: Path, gpus: int) -> Path:
    described = tmp_path / f"{gpus}xh100.json"
    described.write_text(
        json.dumps({"name": f"{gpus} × H100", "gpus": gpus, "gpu_memory_gib": 80, "packages": PACKAGES})
    )
    return described


def test_two_h100s_with_vllm_and_deepspeed_run_the_tp_check_and_name_the_third_gpu_uneven_needs(
    tmp_path, capsys
):
    env = sections.load_environment(str(_h100s(tmp_path, 2)))
    plan = sections.make_plan(env, sections.code_here(), MULTI, budget_s=600)
    assert [s.name for s in plan.run] == ["torchrun", "tp_rollout"]
    reasons = {s["section"]: s["reason"] for s in plan.skipped}
    assert reasons["uneven_placement"] == "needs 3 GPU(s), has 2"
    assert validate.main(["--dry-run", "--env", str(_h100s(tmp_path, 3)), "--budget-s", "1800"]) == 0
    out = capsys.readouterr().out
    would_run = out.split("would run:")[1].split("skipped:")[0]
    for name in MULTI:
        assert f"  {name}" in would_run, out


def test_the_h200_image_skips_the_multi_gpu_sections_by_name():
    h200 = sections.ENVIRONMENTS["h200-image"]
    plan = sections.make_plan(h200, sections.code_here(), sections.BY_NAME, budget_s=480)
    reasons = {s["section"]: s["reason"] for s in plan.skipped}
    assert reasons["uneven_placement"] == "needs deepspeed (not installed)"
    assert reasons["tp_rollout"] == "needs deepspeed, vllm (not installed)"
    one_gpu = sections.Environment("1 GPU, everything", 1, 139.0, frozenset(PACKAGES))
    plan = sections.make_plan(one_gpu, sections.code_here(), MULTI, budget_s=1800)
    reasons = {s["section"]: s["reason"] for s in plan.skipped if s["section"] in MULTI}
    assert reasons == {
        "torchrun": "needs 2 GPU(s), has 1",
        "uneven_placement": "needs 3 GPU(s), has 1",
        "tp_rollout": "needs 2 GPU(s), has 1",
    }


def test_the_checks_launch_the_worker_with_the_torchrun_line_corl_vl_launch_prints(tmp_path):
    cmd = checks_dist.worker_command(3, tmp_path, list(checks_dist.UNEVEN_ARGS), 29511)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert cmd[3:8] == [
        "--nnodes=1",
        "--node_rank=0",
        "--nproc_per_node=3",
        "--master_addr=127.0.0.1",
        "--master_port=29511",
    ]
    assert cmd[8:] == [str(checks_dist.WORKER), str(tmp_path), *checks_dist.UNEVEN_ARGS]
    assert "--gpus" in cmd and cmd[cmd.index("--gpus") + 1] == "2,1"


def _uneven_ranks() -> list[dict]:
    """Three ranks of a 2-step run: qwen on 0-1 (problems a, b / c, d), llama on 2 (all four)."""
    steps = [{"answer_ids": {"qwen": [1, 2], "llama": [3]}, "labels": {"qwen": {"a": "1", "b": None}}}] * 2
    qwen = [{"qwen": {"a": [1.0, 0.0], "b": [0.0, 0.0]}}, {"qwen": {"c": [1.0, 1.0], "d": [0.0, 1.0]}}]
    llama = {"llama": {p: [1.0] for p in "abcd"}}
    return [
        {"agent": "qwen", "steps": steps, "rewards": [qwen[0]] * 2, "changed_tensors": 9, "tensors": 10},
        {"agent": "qwen", "steps": steps, "rewards": [qwen[1]] * 2, "changed_tensors": 9, "tensors": 10},
        {"agent": "llama", "steps": steps, "rewards": [llama] * 2, "changed_tensors": 6, "tensors": 10},
    ]


def test_the_uneven_verdict_needs_the_placement_equal_labels_and_split_shares():
    placement = {"agents": {"qwen": [0, 1], "llama": [2]}, "leftover": []}
    good = checks_dist.judge_uneven(placement, _uneven_ranks())
    assert good["ok"] and good["share_sizes"] == [2, 2, 4] and good["steps_logged"] == 2
    wrong_place = checks_dist.judge_uneven(
        {"agents": {"qwen": [0], "llama": [1, 2]}, "leftover": []}, _uneven_ranks()
    )
    assert not wrong_place["ok"] and not wrong_place["placement_ok"]
    ranks = _uneven_ranks()
    ranks[2] = copy.deepcopy(ranks[2])
    ranks[2]["steps"][1]["labels"]["qwen"]["a"] = "2"  # one rank computed another label
    assert not checks_dist.judge_uneven(placement, ranks)["labels_equal"]
    ranks = _uneven_ranks()
    ranks[1]["rewards"] = [{"qwen": {"b": [0.0, 0.0], "c": [1.0, 1.0]}}] * 2  # b on both ranks, d on none
    assert not checks_dist.judge_uneven(placement, ranks)["shares_ok"]


def _tp_ranks() -> list[dict]:
    sampled = [{p: [[5, 6], [7]] for p in "abcd"}, {p: [[8], [9, 9]] for p in "abcd"}]
    rank = {"group_ranks": [0, 1], "sampled": sampled, "syncs": 2, "engine": "VLLMEngine"}
    return [
        {**rank, "changed_tensors": 9, "tensors": 10},
        {**copy.deepcopy(rank), "changed_tensors": 9, "tensors": 10},
    ]


def test_the_tp_verdict_needs_the_same_tokens_on_both_ranks_and_a_sync():
    assert checks_dist.judge_tp(_tp_ranks(), "vllm")["ok"]
    ranks = _tp_ranks()
    ranks[1]["sampled"][1]["c"][0] = [8, 1]  # rank 1 sampled another completion after the sync
    verdict = checks_dist.judge_tp(ranks, "vllm")
    assert not verdict["ok"] and not verdict["same_rollouts"]
    ranks = _tp_ranks()
    for r in ranks:
        r["syncs"] = 0
    assert not checks_dist.judge_tp(ranks, "vllm")["ok"]
    assert not checks_dist.judge_tp(_tp_ranks(), "hf")["ok"]  # asked for HF, ran vLLM
