"""The fast half of the combination sweep (benchmarks/smoke/combos.py): the covering array really covers every
required pair, and a combined in-process row (LoRA on one agent, a frozen vision tower, CPU optimizer offload
paired with a run without it, 2 updates per batch, micro-batch 3 not dividing the batch, completion logs)
trains with every claim checked. The full sweep (vLLM, torchrun + ZeRO with resume) runs by command.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "smoke"))

import combos  # noqa: E402
import combos_checks as checks  # noqa: E402
import combos_plan as plan  # noqa: E402


def test_every_required_pair_is_in_some_row_and_every_row_can_run():
    rows = plan.covering_array()
    assert rows == plan.covering_array(), "the array is deterministic"
    assert 10 <= len(rows) <= 40, len(rows)
    held = set().union(*(plan._pairs_of(r) for r in rows))
    missing = plan.all_pairs() - held
    assert not missing, sorted(missing)[:5]
    assert all(plan.allowed(r) and set(r) == set(plan.FACTORS) for r in rows)
    # the pairs left out are exactly those no run can hold or the launch does not meet
    names = list(plan.FACTORS)
    for a, b in itertools.combinations(names, 2):
        for x, y in itertools.product(plan.FACTORS[a], plan.FACTORS[b]):
            if plan.allowed({a: x.label, b: y.label}) and a != "launch":
                assert (a, x.label, b, y.label) in held
    # the options the issue names all vary, and each launch (one process, ZeRO-2, ZeRO-3) has its rows
    assert {r["launch"] for r in rows} == {"single", "zero2", "zero3"}
    assert all(len({r[n] for r in rows}) == len(plan.FACTORS[n]) for n in names)


def test_checks_fail_when_a_claim_does_not_hold(tmp_path):
    a = {"w": torch.zeros(3), "v": torch.ones(2)}
    assert checks.weights_close(a, {"w": torch.zeros(3), "v": torch.ones(2)}) == ""
    assert "w differs" in checks.weights_close(a, {"w": torch.full((3,), 1e-3), "v": torch.ones(2)})
    assert "not in both" in checks.weights_close(a, {"w": torch.zeros(3)})
    (tmp_path / "checkpoints" / "step-000001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000002").mkdir()
    (tmp_path / "agents" / "qwen").mkdir(parents=True)
    (tmp_path / "agents" / "qwen" / "completions.jsonl").write_text("{}\n" * 5)
    found = checks.run_dir_claims({"completion_log": "2", "save_limit": "1"}, tmp_path, steps=2)
    assert any("5 completion rows" in p for p in found) and any("checkpoints kept" in p for p in found)


def test_refusal_passes_only_before_models_load():
    refused = {"rc": 2, "error": "train.freeze: …", "stage": "before models load"}
    assert combos.status(refused, "refused").startswith("PASS")
    assert (
        combos.status({**refused, "stage": "after models load"}, "refused")
        == "FAIL: refused after models load"
    )
    assert (
        combos.status({"rc": 0, "rows": {"a": 4}, "changed": {"a": True}}, "refused") == "FAIL: not refused"
    )


@pytest.fixture
def combined_row() -> dict[str, str]:
    row = {n: levels[0].label for n, levels in plan.FACTORS.items()}
    row.update(
        lora="qwen", freeze="vision_tower", offload="cpu", updates="2", micro_batch="3", completion_log="2"
    )
    return row


def test_a_combined_row_trains_and_every_claim_holds(combined_row, tmp_path):
    case = {
        "id": "t01 combined",
        "row": combined_row,
        "sets": plan.overrides(combined_row),
        "expect": "trains",
    }
    record = combos.execute(case, str(tmp_path))
    assert record["status"] == "PASS", (record["status"], record.get("error"), record.get("claims"))
    assert sum(record["rows"].values()) > 0


def test_a_model_loaded_before_a_refusal_is_seen(tiny_checkpoint):
    """The sweeps' "refused before models load" reads model_loads(), not the trainer's ready hook, which runs
    after the agents are built (a freeze or LoRA refusal raised while building them came after the weights)."""
    from sweep_runs import model_loads

    from model_adapters.registry import detect_adapter, get_adapter_class

    path = tiny_checkpoint("tiny-qwen2.5")
    adapter = get_adapter_class(detect_adapter(path))(path)
    with model_loads() as loads:
        adapter.load_model()
    assert loads == [str(path)]
    adapter.load_model()  # no longer counted
    assert loads == [str(path)]


def test_a_crash_is_reported_by_its_exception_not_a_log_line_between_frames():
    from sweep_runs import exception_line

    err = (
        "corl-vl: placement: 2 agents on 1 node(s)\n"
        "Traceback (most recent call last):\n"
        '  File "loop.py", line 3, in step\n'
        "corl-vl: warm-starting the bases …\n"
        "RuntimeError: The size of tensor a (7) must match the size of tensor b (8)\n"
    )
    assert exception_line(err).startswith("RuntimeError: The size of tensor a (7)")
    assert exception_line("no crash here\n") == ""
    ranks = (
        "[rank1]: corl-vl train: error: optimizer.offload: not under DeepSpeed\n"
        "Traceback (most recent call last):\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    assert exception_line(ranks) == "[rank1]: corl-vl train: error: optimizer.offload: not under DeepSpeed"


def test_resume_check_is_not_vacuous(tmp_path):
    (tmp_path / "a" / "agents" / "qwen").mkdir(parents=True)
    (tmp_path / "a" / "agents" / "qwen" / "metrics.jsonl").write_text('{"loss": 0.5}\n')
    assert checks.resume_claims(tmp_path / "b", tmp_path / "a")[0].startswith("resume check: the straight")
    assert "no saved weights" in checks.resume_claims(tmp_path / "a", tmp_path / "b")[0]
