"""``grpo.dynamic_sampling``: groups whose rewards are all equal are dropped and more problems drawn, bounded;
the labels stay keyed by problem id and consistent across agents."""

from __future__ import annotations

from test_cohort import TINY, TINY_COHORT

from corl_vl.config import load_config
from corl_vl.train.cohort import Cohort


class PerDraw:
    """A real engine whose completion texts depend on how many times it has been asked (one call per draw)."""

    def __init__(self, engine, draws):
        self.engine, self.draws, self.calls = engine, draws, 0

    def generate(self, problems, **kwargs):
        rollouts = self.engine.generate(problems, **kwargs)
        answers = self.draws[min(self.calls, len(self.draws) - 1)]
        self.calls += 1
        for r in rollouts:
            for j, c in enumerate(r.completions):
                c.text = f"so the answer is \\boxed{{{answers[j]}}}"
        return rollouts

    def sync_weights(self, model):
        self.engine.sync_weights(model)

    def sleep(self):
        self.engine.sleep()

    def wake(self, tags=None):
        self.engine.wake(tags)


UNANIMOUS, SPLIT = (1, 1, 1, 1), (3, 5, 5, 5)


def _cohort(*extra):
    return Cohort.from_config(load_config(TINY_COHORT, [*TINY, *extra]))


def test_unvaried_groups_are_replaced_by_a_new_draw():
    cohort = _cohort("reward.name=ttrl", "grpo.dynamic_sampling=2")
    for agent in cohort.agents:
        agent.engine = PerDraw(agent.engine, [UNANIMOUS, SPLIT])
    first_ids = cohort.sampler._order()[:2]
    metrics = cohort.step()
    for name, agent_step in zip(("qwen", "internvl"), cohort.last):
        m = metrics[name]
        assert m["dynamic/draws"] == 1.0 and m["dynamic/varied_groups"] == 2.0
        assert m["groups/zero_std_frac"] == 1.0  # the step's metrics describe the first draw
        ids = [r.problem_id for r in agent_step.rollouts]
        assert not set(ids) & set(first_ids)  # trained on the second draw's problems
        assert agent_step.rewards == {pid: [0.0, 1.0, 1.0, 1.0] for pid in ids}
        assert set(agent_step.labels) == set(ids) and set(agent_step.labels.values()) == {"5"}
        assert m["trained_rows"] == 8.0
    assert list(cohort.last_answers["qwen"]) == list(cohort.last_answers["internvl"])  # one id set per draw


def test_the_bound_stops_drawing_and_the_batch_keeps_its_size():
    cohort = _cohort("reward.name=ttrl", "grpo.dynamic_sampling=1")
    for agent in cohort.agents:
        agent.engine = PerDraw(agent.engine, [UNANIMOUS])
    first_ids = cohort.sampler._order()[:2]
    metrics = cohort.step()
    assert metrics["qwen"]["dynamic/draws"] == 1.0 and metrics["qwen"]["dynamic/varied_groups"] == 0.0
    assert [r.problem_id for r in cohort.last[0].rollouts] == first_ids  # topped up from the first draw
    assert metrics["qwen"]["trained_rows"] == 0.0
    assert cohort.agents[0].engine.calls == 2  # one extra draw, no more


def test_peer_labels_come_from_the_same_draw_for_every_agent():
    cohort = _cohort("grpo.dynamic_sampling=3")  # co_rl: each agent's label is its peer's majority
    qwen, internvl = cohort.agents
    qwen.engine = PerDraw(qwen.engine, [UNANIMOUS, SPLIT])
    internvl.engine = PerDraw(internvl.engine, [UNANIMOUS, (3, 3, 3, 5)])
    metrics = cohort.step()
    st_q, st_i = cohort.last
    assert [r.problem_id for r in st_q.rollouts] == [r.problem_id for r in st_i.rollouts]
    assert set(st_q.labels.values()) == {"3"} and set(st_i.labels.values()) == {"5"}
    assert metrics["qwen"]["dynamic/draws"] == 1.0
