"""A reward plug-in runs behind a boundary (corl_vl/rewards/boundary.py): its output is checked (every agent, every
problem id, one finite number per completion, labels as text) and a failure is one line naming the plug-in and
the problem id; its inputs are copies, so a plug-in that edits them changes nothing the trainer keeps."""

from __future__ import annotations

import re
import sys

import pytest
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.cli import main
from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.rewards import plugins, registry
from corl_vl.train.cohort import Cohort

# one plug-in file, its behaviour chosen by MODE: each mode is one way a user's reward can go wrong
PLUGIN = """
import math
from corl_vl.rewards.registry import StepRewards

MODE = "ok"


def probe_reward(inputs):
    k = {name: {pid: len(inputs.completions[name][pid]) for pid in inputs.mine} for name in inputs.local}
    rewards = {name: {pid: [float(j % 2) for j in range(k[name][pid])] for pid in inputs.mine}
               for name in inputs.local}
    first, pid = inputs.local[0], inputs.mine[0]
    if MODE == "raises":
        raise ValueError("my reward broke")
    if MODE == "nan":
        rewards[first][pid][1] = math.nan
    if MODE == "inf":
        rewards[first][pid][0] = -math.inf
    if MODE == "short":
        rewards[first][pid] = rewards[first][pid][:-1]
    if MODE == "strings":
        rewards[first][pid] = ["1"] * k[first][pid]
    if MODE == "one_string":
        rewards[first][pid] = "1111"
    if MODE == "no_agent":
        del rewards[first]
    if MODE == "no_problem":
        del rewards[first][pid]
    if MODE == "none":
        return None
    if MODE == "dict":
        return rewards
    if MODE == "bad_label":
        return StepRewards(rewards, {first: {pid: 3}})
    if MODE == "mutates":
        for answers in inputs.answers.values():
            for group in answers.values():
                group[:] = ["hacked"] * len(group)
        for texts in inputs.completions.values():
            for group in texts.values():
                group.clear()
        for problem in inputs.problems.values():
            problem.answer = "hacked"
        inputs.cfg.grpo.k = 99
        inputs.names.append("intruder")
    return StepRewards(rewards, {})
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """(cohort, plug-in module): the tiny cohort trained by ``probe_reward`` plus 0.5 × format."""
    saved = dict(registry.REWARDS)
    path = tmp_path_factory.mktemp("plugin") / "probe_rewards.py"
    path.write_text(PLUGIN)
    overrides = [
        *TINY,
        f"reward.module={path}:probe_reward",
        "reward.name=probe_reward",
        "reward.combine=[{name: format, weight: 0.5}]",
    ]
    cohort = Cohort.from_config(load_config(TINY_COHORT, overrides))
    for agent in cohort.agents:
        agent.engine = ForcedTexts(agent.engine, boxed(3, 5, 5, 5))
    module = sys.modules[registry.REWARDS["probe_reward"].function.__module__]
    yield cohort, module
    registry.REWARDS.clear()
    registry.REWARDS.update(saved)
    plugins._scanned = False


@pytest.mark.parametrize(
    ("mode", "what"),
    [
        ("raises", r"raised ValueError: my reward broke on problems '"),
        ("nan", r"problem '[^']+', completion 1: reward is nan; rewards must be finite"),
        ("inf", r"problem '[^']+', completion 0: reward is -inf"),
        ("short", r"problem '[^']+': 3 rewards for 4 completions"),
        ("strings", r"problem '[^']+', completion 0: reward is str '1', not a number"),
        ("one_string", r"problem '[^']+': rewards are str '1111'; expected a list of 4 numbers"),
        ("no_agent", r"agent 'qwen' has no entry in the rewards \(problems '"),
        ("no_problem", r"agent 'qwen', problem '[^']+': no rewards \(expected 4"),
        ("none", r"returned None; expected StepRewards"),
        ("dict", r"returned dict .*expected StepRewards"),
        ("bad_label", r"agent 'qwen', problem '[^']+': label is int '3'; expected text or None"),
    ],
)
def test_a_faulty_plugin_is_one_line_naming_it_and_the_problem(probe, mode, what):
    cohort, module = probe
    module.MODE = mode
    step = cohort.step_index
    try:
        with pytest.raises(CorlError) as err:
            cohort.step()
    finally:
        module.MODE = "ok"
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("reward plug-in 'probe_reward' (probe_rewards.py)"), line
    assert err.value.__cause__ is None or mode == "raises"
    assert re.search(what, line), line
    assert cohort.step_index == step  # nothing trained on a refused reward


def test_a_plugin_editing_its_inputs_changes_nothing_the_trainer_keeps(probe):
    cohort, module = probe
    module.MODE = "mutates"
    golds = {pid: p.answer for pid, p in cohort.base.items()}
    try:
        cohort.step()
    finally:
        module.MODE = "ok"
    assert cohort.cfg.grpo.k == 4 and cohort.names == ["qwen", "internvl"]
    assert {pid: p.answer for pid, p in cohort.base.items()} == golds
    for name in cohort.names:  # the logged answers and texts are the sampled ones
        for pid, answers in cohort.last_answers[name].items():
            assert answers == ["3", "5", "5", "5"], (name, pid)
    for agent_step in cohort.last:
        for rollout in agent_step.rollouts:
            assert rollout.completions[0].text == "so the answer is \\boxed{3}"
        # probe_reward's 0/1 by position plus 0.5 × format (every completion boxed at its end)
        assert all(r == [0.5, 1.5, 0.5, 1.5] for r in agent_step.rewards.values())


def test_a_plugin_that_raises_ends_the_cli_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(registry, "REWARDS", dict(registry.REWARDS))
    monkeypatch.setattr(plugins, "_scanned", False)
    (tmp_path / "bad.py").write_text("def bad(inputs):\n    raise KeyError('no such thing')\n")
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--config", str(TINY_COHORT), "--max-steps", "1", "--output-dir", "run", "--no-progress"]
    for item in [*TINY, "grpo.k=2", "grpo.max_new_tokens=2", "reward.module=bad.py:bad", "reward.name=bad"]:
        argv += ["--set", item]
    assert main(argv) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "reward plug-in 'bad' (bad.py) raised KeyError: 'no such thing' on problems '" in lines[0]
