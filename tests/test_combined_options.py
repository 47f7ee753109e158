"""Options that train alone, used together on tiny real models (issue #45, "Options combined").

The class: the no-grad pass's record (``AgentStep.scored``) is padded to the width of the longest completion of
the rows it was computed on. Any selection of rows afterwards (the first k of ``grpo.votes``, the varied groups
``grpo.dynamic_sampling`` keeps, a mini-batch of ``grpo.updates_per_batch``) may drop that longest completion,
while the batch built from the selected rows is as wide as *their* longest one: the update then compared a
``[B, 7]`` with a ``[B, 8]``. Engines here keep their real tokens but end some completions early, so the widths
differ on purpose.
"""

from __future__ import annotations

import torch
from test_cohort import TINY, TINY_COHORT

from corl_vl.config import load_config
from corl_vl.train.cohort import Cohort


class Lengths:
    """A real engine whose completion ``j`` of group ``g`` is cut to ``lengths[j]`` tokens (``None``: as sampled)
    and answers ``answers[j]``, where ``(lengths, answers) = draws[call][g % len(draws[call])]``: one pattern
    per group, the next list at each call (draw)."""

    def __init__(self, engine, draws):
        self.engine, self.draws, self.calls = engine, draws, 0

    def generate(self, problems, **kwargs):
        rollouts = self.engine.generate(problems, **kwargs)
        groups = self.draws[min(self.calls, len(self.draws) - 1)]
        self.calls += 1
        for g, r in enumerate(rollouts):
            lengths, answers = groups[g % len(groups)]
            for j, c in enumerate(r.completions):
                n = lengths[j % len(lengths)]
                if n is not None and n < len(c.ids):
                    c.ids, c.logprobs, c.finish_reason = c.ids[:n], c.logprobs[:n], "stop"
                c.text = f"so the answer is \\boxed{{{answers[j % len(answers)]}}}"
        return rollouts

    def sync_weights(self, model):
        self.engine.sync_weights(model)

    def sleep(self):
        self.engine.sleep()

    def wake(self, tags=None):
        self.engine.wake(tags)


def _cohort(*extra):
    return Cohort.from_config(load_config(TINY_COHORT, [*TINY, "grpo.max_new_tokens=6", *extra]))


def _trained_everything(metrics, cohort):
    for agent in cohort.agents:
        m = metrics[agent.name]
        assert m["trained_rows"] > 0 and torch.isfinite(torch.tensor(m["loss"])), m


def test_votes_beyond_k_whose_longest_completion_only_votes():
    # the trained first 2 are 2 tokens long; the 2 that only vote are as long as sampled (6)
    cohort = _cohort("grpo.k=2", "grpo.votes=4", "grpo.updates_per_batch=2")
    for agent in cohort.agents:
        agent.engine = Lengths(agent.engine, [[((2, 2, None, None), (3, 5, 3, 3))]])
    metrics = cohort.step()
    _trained_everything(metrics, cohort)
    for agent_step in cohort.last:
        width = max(len(c.ids) for r in agent_step.rollouts for c in r.completions)
        assert agent_step.scored.mask.shape[1] == width == 2


def test_dynamic_sampling_keeps_shorter_groups_than_the_draw_it_drops():
    # in each draw the first group splits in 2-token completions (kept), the second is unanimous at full
    # length (dropped): the kept rows are narrower than the draw they came from
    cohort = _cohort("reward.name=ttrl", "grpo.dynamic_sampling=2", "grpo.updates_per_batch=2")
    for agent in cohort.agents:
        agent.engine = Lengths(agent.engine, [[((2,), (3, 5, 5, 5)), ((None,), (1,))]])
    metrics = cohort.step()
    _trained_everything(metrics, cohort)
    assert all(metrics[a.name]["dynamic/draws"] == 1.0 for a in cohort.agents)


def test_the_issues_combination_trains_every_option_as_claimed():
    # LoRA on one agent, frozen towers, CPU offload, 2 updates, dynamic sampling, votes > k, truncated: mask,
    # dr_grpo, ring, micro-batch 3; draw 1 is unanimous (dropped), draw 2 splits with short trained rows
    cohort = _cohort(
        "agents.0.lora={}",
        "train.freeze=[vision_tower]",
        "optimizer.offload=cpu",
        "grpo.updates_per_batch=2",
        "grpo.dynamic_sampling=2",
        "grpo.k=4",
        "grpo.votes=6",
        "grpo.truncated=mask",
        "grpo.loss_type=dr_grpo",
        "grpo.advantage=dr_grpo",
        "reward.topology=ring",
        "grpo.micro_batch_size=3",
    )
    towers = {
        a.name: {
            n: p.detach().clone() for n, p in a.model.named_parameters() if "visual" in n or "vision" in n
        }
        for a in cohort.agents
    }
    # per draw: a split group of short trained rows whose full-length completions only vote (kept), and a
    # unanimous full-length group (dropped)
    draws = [[((2, 3, 2, 4, None, None), (3, 5, 5, 3, 3, 3)), ((None,), (1,))]]
    for agent in cohort.agents:
        agent.engine = Lengths(agent.engine, draws)
    metrics = cohort.step()
    _trained_everything(metrics, cohort)
    for agent in cohort.agents:
        assert towers[agent.name], agent.name
        for name, before in towers[agent.name].items():
            assert torch.equal(dict(agent.model.named_parameters())[name], before), name
        assert metrics[agent.name]["update/count"] == 2.0
