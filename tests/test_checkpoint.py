"""Exact resume: a run killed after a checkpoint and resumed ends with the same metrics and weights."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_cohort import TINY, TINY_COHORT, ForcedTexts

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.recipe import train
from corl_vl.train.checkpoint import latest_checkpoint
from corl_vl.train.loop import Callback


class Killed(Exception):
    pass


def _builder(kill_at_call: int | None = None):
    """Cohort with answers derived from the sampled ids (so rewards vary); optionally 'killed' mid-run."""

    def prepare(cohort):
        calls = {"n": 0}
        for i, agent in enumerate(cohort.agents):
            inner = ForcedTexts(
                agent.engine, lambda pid, j, c, i=i: f"\\boxed{{{((c.ids or [0])[0] + i) % 3}}}"
            )
            if i == 0:
                generate = inner.generate

                def counted(problems, _generate=generate, **kw):
                    if calls["n"] == kill_at_call:
                        raise Killed
                    calls["n"] += 1
                    return _generate(problems, **kw)

                inner.generate = counted
            agent.engine = inner

    return prepare


def _config(out: Path):
    overrides = [
        *TINY,
        "train.max_steps=4",
        "train.save_every=2",
        "train.scheduler=cosine",
        "train.warmup_ratio=0.25",
        f"train.output_dir={out}",
    ]
    return load_config(TINY_COHORT, overrides)


def _records(run: Path, agent: str):
    lines = (run / "agents" / agent / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def _weights(run: Path, agent: str):
    from safetensors.torch import load_file

    return load_file(str(latest_checkpoint(run) / agent / "model.safetensors"))


def test_resume_is_exact(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train(_config(full), progress=False, prepare=_builder())
    with pytest.raises(Killed):  # dies in the rollout of step index 3, after the step-2 checkpoint
        train(_config(resumed), progress=False, prepare=_builder(kill_at_call=3))
    assert latest_checkpoint(resumed).name == "step-000002"
    assert [r["step"] for r in _records(resumed, "qwen")] == [0, 1, 2]
    with (resumed / "agents" / "qwen" / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 3, "reward/me')  # killed mid-write: a cut-off last line must not block the resume
    with pytest.raises(CorlError, match="--resume"):
        train(_config(resumed), progress=False, prepare=_builder())
    train(_config(resumed), resume=True, progress=False, prepare=_builder())

    for agent in ("qwen", "internvl"):
        a, b = _records(full, agent), _records(resumed, agent)
        assert [r["step"] for r in b] == [0, 1, 2, 3]
        assert a == b, agent
        assert sum(r["trained_rows"] for r in a) > 0  # the run really trained
        wa, wb = _weights(full, agent), _weights(resumed, agent)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert latest_checkpoint(full).name == "step-000004"
    assert (full / "plots").exists() is False  # train.plot=false in TINY


def test_checkpoint_folder_loads_with_from_pretrained(tmp_path):
    run = tmp_path / "run"
    cfg = _config(run)
    cfg.train.max_steps = 1
    cfg.agents[0].template_date = "2025-02-03"  # recorded in config.yaml and in the checkpoint
    train(cfg, progress=False, prepare=_builder())
    assert latest_checkpoint(run).name == "step-000001"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert [a["template_date"] for a in saved["agents"]] == ["2025-02-03", "2024-07-26"]
    record = json.loads((latest_checkpoint(run) / "qwen" / "corl_prompt.json").read_text())
    assert record["template_date"] == "2025-02-03" and "<|im_start|>" in record["chat_template"]
    link = run / "checkpoints" / "latest"  # a directory link: checkpoints/latest/<agent> is a model folder
    assert link.is_symlink() and link.resolve() == latest_checkpoint(run).resolve()
    from transformers import AutoConfig

    from model_adapters.registry import create_adapter

    assert AutoConfig.from_pretrained(link / "qwen").model_type
    adapter = create_adapter(str(link / "qwen"))
    assert adapter.template_date == "2025-02-03"  # evaluating the checkpoint renders the trained prompts
    model = adapter.load_model()
    assert sum(p.numel() for p in model.parameters()) > 0


def test_latest_pointer_of_older_runs_still_resolves(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    for step in ("step-000002", "step-000004"):
        (root / step).mkdir(parents=True)
        (root / step / "meta.json").write_text('{"step": 2, "agents": ["a"], "format": 2}')
    (root / "latest").write_text("step-000002")  # the text pointer runs wrote before it became a link
    assert latest_checkpoint(tmp_path / "run") == root / "step-000002"
    (root / "latest").unlink()
    assert latest_checkpoint(tmp_path / "run") == root / "step-000004"  # no pointer: the newest complete one


class _DrawsAtStart(Callback):
    """Draws from every global RNG before the first step, as a module first imported then would (rich does)."""

    def on_fit_start(self, run):
        random.random(), np.random.rand(), torch.rand(1)


class _RngAtEnd(Callback):
    """Each global RNG's state after the last step."""

    def on_fit_end(self, run):
        self.state = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state())


def test_resume_restores_rng_after_everything_that_draws_before_the_first_step(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    straight, again = _RngAtEnd(), _RngAtEnd()
    train(_config(full), progress=False, prepare=_builder(), callbacks=[_DrawsAtStart(), straight])
    with pytest.raises(Killed):
        train(_config(resumed), progress=False, prepare=_builder(kill_at_call=3), callbacks=[_DrawsAtStart()])
    train(
        _config(resumed), resume=True, progress=False, prepare=_builder(), callbacks=[_DrawsAtStart(), again]
    )
    assert straight.state[0] == again.state[0]
    assert straight.state[1] == again.state[1]
    assert torch.equal(straight.state[2], again.state[2])
    assert _records(full, "qwen") == _records(resumed, "qwen")
