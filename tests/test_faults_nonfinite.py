"""Faults of the second probe, non-finite training (docs/reliability.md, "Round 2"); each failed before its fix.

A NaN/inf loss or gradient norm never reaches the weights, a streak of them stops the run in one line, NaN scores
at rollout name the agent, and ``grad_clip: 0`` means no clipping.
"""

from __future__ import annotations

import json

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.errors import CorlError
from corl_vl.train.run_lock import release_run_locks


# ------------------------------------------------------------------------------------------ non-finite never trains
def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_nonfinite_loss_skips_the_agents_step_with_a_metric_and_a_log_line(caplog):
    import math

    from test_update_edges import _batch, _cfg, solo_rollout

    agent, rows, comps = solo_rollout(_cfg(lr=1e-2))
    before = _params(agent.model)
    with caplog.at_level("WARNING", logger="corl_vl.train.agent"):
        metrics = agent.update(_batch(rows, comps, [math.nan, 1.0, -1.0, 1.0]))
    assert metrics["update/nonfinite"] == 1.0 and not math.isfinite(metrics["loss"])
    assert all(a.equal(b) for a, b in zip(_params(agent.model), before))  # no optimizer step
    assert not agent.backend.optimizer.state  # AdamW's moments untouched
    assert "agent solo: non-finite loss" in caplog.text and "optimizer step skipped" in caplog.text
    metrics = agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0]))  # the next finite step trains
    assert metrics["update/nonfinite"] == 0.0
    assert not all(a.equal(b) for a, b in zip(_params(agent.model), before))


def _tiny_backend(grad_clip: float):
    from corl_vl.config import TrainConfig
    from corl_vl.train.backends import TorchBackend
    from model_adapters.registry import create_adapter

    model = create_adapter("tiny-qwen2.5").load_model().train()
    cfg = TrainConfig(lr=1e-2, grad_clip=grad_clip, warmup_ratio=0.0, scheduler="constant")
    return model, TorchBackend(model, cfg, lr=1e-2)


def test_nonfinite_gradient_norm_skips_the_torch_step():
    import math

    import torch

    model, backend = _tiny_backend(grad_clip=1.0)
    before = _params(model)
    for i, p in enumerate(model.parameters()):
        p.grad = torch.full_like(p, math.inf if i == 0 else 1.0)
    norm = backend.step(None, zero_loss=lambda: torch.zeros(()))
    assert not math.isfinite(norm)
    assert all(a.equal(b) for a, b in zip(_params(model), before)) and not backend.optimizer.state
    assert all(p.grad is None for p in model.parameters())


def test_grad_clip_zero_means_no_clipping():
    import math

    import torch

    model, backend = _tiny_backend(grad_clip=0.0)
    before = _params(model)
    count = 0
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)
        count += p.numel()
    norm = backend.step(None, zero_loss=lambda: torch.zeros(()))
    assert norm == pytest.approx(3.0 * math.sqrt(count), rel=1e-4)
    # AdamW's first step moves every weight by lr·sign(g) when the gradient is not zeroed
    assert all(not a.equal(b) for a, b in zip(_params(model), before))


def test_k_nonfinite_steps_in_a_row_stop_the_run_naming_agent_step_and_checkpoint(tmp_path):
    import dataclasses
    import math

    from test_checkpoint import _builder

    from corl_vl.config import load_config
    from corl_vl.recipe import train
    from corl_vl.train.checkpoint import latest_checkpoint
    from corl_vl.train.nonfinite import NONFINITE_STEPS

    run = tmp_path / "run"
    cfg = load_config(
        TINY_COHORT, [*TINY, "train.max_steps=6", "train.save_every=1", f"train.output_dir={run}"]
    )
    name = cfg.agents[0].name
    build_plain = _builder()

    def build(cohort):  # the first agent's advantages are NaN every step (its loss is non-finite)
        build_plain(cohort)
        agent = cohort.agents[0]
        update = agent.update
        agent.update = lambda batch, old=None, **kw: update(
            dataclasses.replace(batch, advantages=batch.advantages * math.nan), old, **kw
        )

    with pytest.raises(CorlError) as err:
        train(cfg, progress=False, prepare=build)
    release_run_locks()
    line = str(err.value)
    last = NONFINITE_STEPS - 1
    assert f"agent {name}: non-finite loss or gradient norm in {NONFINITE_STEPS} steps in a row" in line
    assert f"(steps 0–{last})" in line and f"last checkpoint: {latest_checkpoint(run)}" in line
    assert latest_checkpoint(run).name == f"step-{last:06d}"
    rows = [json.loads(x) for x in (run / "agents" / name / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(NONFINITE_STEPS))  # every step is recorded
    assert all(r["update/nonfinite"] == 1.0 for r in rows)


def test_nan_logits_at_rollout_name_the_agent_not_a_sampling_traceback(tmp_path):
    import math

    import torch
    from test_checkpoint import _builder

    from corl_vl.config import load_config
    from corl_vl.recipe import train

    run = tmp_path / "run"
    cfg = load_config(TINY_COHORT, [*TINY, "train.max_steps=2", f"train.output_dir={run}"])
    name = cfg.agents[0].name
    build_plain = _builder()

    def build(cohort):  # the first agent's weights are NaN (a NaN checkpoint, an exploded update)
        build_plain(cohort)
        with torch.no_grad():
            next(cohort.agents[0].model.parameters()).fill_(math.nan)

    with pytest.raises(CorlError) as err:
        train(cfg, progress=False, prepare=build)
    release_run_locks()
    line = str(err.value)
    assert line.startswith(f"agent {name}: the model's next-token scores are NaN/inf")
    assert "of its weights are NaN/inf (step 0; no checkpoint saved yet)" in line


@pytest.mark.parametrize(
    "ds",
    [
        {"bf16": {"enabled": True, "check_grad_overflow": False}},
        {"zero_optimization": {"compute_grad_norm": False}},
    ],
)
def test_deepspeed_without_its_overflow_check_is_refused(tmp_path, ds):
    from types import SimpleNamespace

    from corl_vl.config import load_config
    from corl_vl.train.backends import launch_backend

    path = tmp_path / "ds.json"
    ds = {**ds, "zero_optimization": {"stage": 2, **ds.get("zero_optimization", {})}}
    path.write_text(json.dumps(ds))
    cfg = load_config(TINY_COHORT, ["train.grad_clip=0", f"distributed.deepspeed={path}"])
    _, backend = _tiny_backend(grad_clip=0.0)
    launch = SimpleNamespace(group_size=1, mpu=None, dp_group=None)
    with pytest.raises(
        CorlError, match=r"check_grad_overflow and zero_optimization\.compute_grad_norm must stay true"
    ):
        launch_backend(backend, cfg.distributed, launch, cfg.train, cfg.optimizer)
