"""The cohort step on tiny real models: peer rewards from forced answers, real updates of both towers.

Random tiny models never write a parseable answer, so tests control the *text* an engine reports (the ids and
logprobs stay the model's real samples): that is controlled input to the reward, not a mock of the model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from corl_vl.config import apply_overrides, config_from_dict, load_config
from corl_vl.data.synth import generate_problems
from corl_vl.errors import CorlError
from corl_vl.train.cohort import Cohort, Sampler, agent_view

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
TINY_COHORT = Path(__file__).resolve().parent / "fixtures" / "tiny_cohort.yaml"  # random tiny models
TINY = [
    "data.limit=4",
    "data.problems_per_step=2",
    "grpo.k=4",
    "grpo.max_new_tokens=6",
    "train.lr=1e-3",
    "train.warmup_ratio=0",
    "train.scheduler=constant",
    "train.plot=false",
]


class ForcedTexts:
    """A real engine whose completions' texts are replaced by ``texts(problem_id, j, completion)``."""

    def __init__(self, engine, texts):
        self.engine, self.texts = engine, texts

    def generate(self, problems, **kwargs):
        rollouts = self.engine.generate(problems, **kwargs)
        for r in rollouts:
            for j, c in enumerate(r.completions):
                c.text = self.texts(r.problem_id, j, c)
        return rollouts

    def sync_weights(self, model):
        self.engine.sync_weights(model)

    def sleep(self):
        self.engine.sleep()

    def wake(self, tags=None):
        self.engine.wake(tags)


def boxed(*values):
    return lambda pid, j, c: f"so the answer is \\boxed{{{values[j]}}}"


@pytest.fixture
def cohort():
    """A fresh cohort per test: tests wrap its engines and train it (function scope keeps them independent)."""
    return Cohort.from_config(load_config(TINY_COHORT, TINY))


def _split(model):
    named = dict(model.named_parameters())
    vision = {n: p.detach().clone() for n, p in named.items() if "vision" in n or "visual" in n}
    language = {n: p.detach().clone() for n, p in named.items() if "language_model" in n or "lm_head" in n}
    assert vision and language
    return vision, language


def test_peer_rewards_from_forced_answers_and_both_towers_update(cohort):
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))  # qwen's own majority: 5
    internvl.engine = ForcedTexts(internvl.engine, boxed(3, 3, 3, 5))  # internvl's own majority: 3
    before = {a.name: _split(a.model) for a in cohort.agents}

    metrics = cohort.step()

    st_q, st_i = cohort.last
    ids = list(st_q.answers)
    assert ids == list(st_i.answers) and len(ids) == 2
    # qwen is supervised by internvl (label 3), internvl by qwen (label 5)
    assert st_q.labels == dict.fromkeys(ids, "3") and st_i.labels == dict.fromkeys(ids, "5")
    assert st_q.rewards == {pid: [1.0, 0.0, 0.0, 0.0] for pid in ids}
    assert st_i.rewards == {pid: [0.0, 0.0, 0.0, 1.0] for pid in ids}
    for name in ("qwen", "internvl"):
        m = metrics[name]
        assert m["reward/mean"] == 0.25 and m["label/coverage"] == 1.0
        assert m["peer/agreement"] == 0.0  # each agent's own majority disagrees with its peer's
        assert m["groups/zero_std_frac"] == 0.0 and m["trained_rows"] == 8.0
        # forced equal-length completions with zero-sum advantages: the token-mean loss is 0 by arithmetic
        assert m["grad_norm"] > 0 and math.isfinite(m["loss"])
        assert m["length/max"] <= 6
    for agent in cohort.agents:
        vision, language = before[agent.name]
        after = dict(agent.model.named_parameters())
        assert any(not torch.equal(after[n].detach(), p) for n, p in vision.items()), agent.name
        assert any(not torch.equal(after[n].detach(), p) for n, p in language.items()), agent.name


def test_no_label_means_no_update(cohort):
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(1, 1, 2, 2))  # a tie → no label for internvl
    internvl.engine = ForcedTexts(internvl.engine, lambda pid, j, c: "no idea")  # no answer → no label
    before = [p.detach().clone() for p in internvl.model.parameters()]
    metrics = cohort.step()
    for name in ("qwen", "internvl"):
        assert metrics[name]["label/coverage"] == 0.0 and metrics[name]["reward/mean"] == 0.0
        assert metrics[name]["trained_rows"] == 0.0
    assert all(torch.equal(a.detach(), b) for a, b in zip(internvl.model.parameters(), before))


def test_ttrl_baseline_through_the_same_loop():
    cohort = Cohort.from_config(load_config(TINY_COHORT, [*TINY, "reward.name=ttrl"]))
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))
    internvl.engine = ForcedTexts(internvl.engine, boxed(3, 3, 3, 5))
    cohort.step()
    st_q, st_i = cohort.last
    assert set(st_q.labels.values()) == {"5"} and set(st_i.labels.values()) == {"3"}  # each its own majority
    assert all(r == [0.0, 1.0, 1.0, 1.0] for r in st_q.rewards.values())
    assert all(r == [1.0, 1.0, 1.0, 0.0] for r in st_i.rewards.values())


def test_sampler_is_seeded_and_distinct():
    s = Sampler([f"p{i}" for i in range(5)], seed=3)
    first = [s.next(2) for _ in range(4)]
    assert all(len(set(b)) == 2 for b in first)
    assert first[0] + first[1] == Sampler([f"p{i}" for i in range(5)], seed=3).next(4)
    assert s.state_dict() == {"epoch": 1, "cursor": 4}  # epoch 0 had room for two batches of 2 out of 5
    with pytest.raises(CorlError, match="only 5 problems"):
        s.next(6)


def test_shuffled_rephrase_file_is_rejected(tmp_path):
    base = generate_problems(3, seed=0)
    rows = [{"id": p.id, "question": "Reworded: " + p.question, "answer": p.answer} for p in base]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config_from_dict({"agents": [{"name": "a", "model": "m"}, {"name": "b", "model": "n"}]})
    view = agent_view(base, cfg.data, str(good), text_only=False)
    assert [p.id for p in view] == [p.id for p in base] and view[0].images == base[0].images
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("".join(json.dumps(r) + "\n" for r in [rows[1], rows[0], rows[2]]))
    with pytest.raises(CorlError, match="shuffled"):
        agent_view(base, cfg.data, str(shuffled), text_only=False)


def test_text_only_agent_gets_the_text_rendering_with_the_same_ids():
    base = generate_problems(2, seed=0)
    cfg = config_from_dict({"agents": [{"name": "a", "model": "m"}, {"name": "b", "model": "n"}]})
    view = agent_view(base, cfg.data, None, text_only=True)
    assert [p.id for p in view] == [p.id for p in base]
    assert all(not p.images and p.question == b.meta["text_question"] for p, b in zip(view, base))


def test_co_rewarding_i_views_label_each_other(tmp_path):
    """One model, two views: each view's group is rewarded by the other view's majority (--baseline co_rewarding_i)."""
    problems = generate_problems(
        4, seed=0
    )  # = the cohort's data (data.train synthetic, data.limit=4, seed 0)
    rows = [{"id": p.id, "question": "Put differently: " + p.question, "answer": p.answer} for p in problems]
    rephrased = tmp_path / "rephrased.jsonl"
    rephrased.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agent = {"name": "qwen", "model": "tiny-qwen2.5-vl", "data_view": str(rephrased)}
    cfg = apply_overrides(config_from_dict({"agents": [agent], "train": {"reward": "co_rewarding_i"}}), TINY)
    cohort = Cohort.from_config(cfg)
    (qwen,) = cohort.agents
    original, twin = boxed(3, 3, 5, 5), boxed(3, 3, 3, 5)  # original's majority: a tie; the rephrase's: 3
    qwen.engine = ForcedTexts(
        qwen.engine, lambda pid, j, c: (twin if pid.endswith("~rephrased") else original)(pid, j, c)
    )
    metrics = cohort.step()["qwen"]
    (step,) = cohort.last
    originals = [pid for pid in step.answers if not pid.endswith("~rephrased")]
    assert len(originals) == 2 and len(step.answers) == 4
    for pid in originals:
        assert step.labels[pid] == "3" and step.rewards[pid] == [1.0, 1.0, 0.0, 0.0]  # from the rephrase
        assert step.labels[pid + "~rephrased"] is None  # the original view tied: no label, no reward
        assert step.rewards[pid + "~rephrased"] == [0.0, 0.0, 0.0, 0.0]
    assert metrics["trained_rows"] == 8.0 and metrics["grad_norm"] > 0
    assert "Put differently" in qwen.view[originals[0] + "~rephrased"].question
