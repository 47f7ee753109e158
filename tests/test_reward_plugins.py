"""Rewards as plug-ins: the README's format reward from a file (``reward.module``) added to the peer reward
(``reward.combine``), the ``corl_vl.rewards`` entry-point group, the built-in format and length rewards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.rewards import plugins, registry
from corl_vl.rewards.combine import add_weighted
from corl_vl.train.cohort import Cohort

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_rewards(monkeypatch):
    """Rewards registered by a test are forgotten after it (the table and the entry-point scan)."""
    monkeypatch.setattr(registry, "REWARDS", dict(registry.REWARDS))
    monkeypatch.setattr(plugins, "_scanned", False)


def _documented_example(path: Path) -> tuple[str, str]:
    """The format-reward example (Python file, YAML) as the README and docs/training.md show it."""
    text = path.read_text()
    python = re.search(r"```python\n(# my_rewards\.py.*?)```", text, re.S)
    yaml = re.search(r"```yaml\n(reward:\n  module: my_rewards\.py.*?)```", text, re.S)
    assert python and yaml, f"{path}: the format-reward example is missing"
    return python.group(1), yaml.group(1)


def test_readme_and_training_docs_show_the_same_example():
    readme = _documented_example(ROOT / "README.md")
    assert readme == _documented_example(ROOT / "docs" / "training.md")
    assert len(readme[0].strip().splitlines()) <= 16


def test_documented_format_reward_adds_to_the_peer_reward(tmp_path, clean_rewards, monkeypatch):
    python, yaml_text = _documented_example(ROOT / "README.md")
    (tmp_path / "my_rewards.py").write_text(python)
    config = tmp_path / "cohort.yaml"
    config.write_text(TINY_COHORT.read_text().replace("reward:\n  topology: mutual\n", yaml_text))
    monkeypatch.chdir(tmp_path)  # the example names the file relative to where the run starts
    cohort = Cohort.from_config(load_config(config, TINY))
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))  # majority 5 → internvl's label
    texts = ["\\boxed{3}", "\\boxed{3}", "\\boxed{3}", "\\boxed{5} is my guess"]  # majority 3 → qwen's label
    internvl.engine = ForcedTexts(internvl.engine, lambda pid, j, c: texts[j])
    cohort.step()
    st_q, st_i = cohort.last
    # Co-RL's hard reward plus 0.5 × format (the last internvl completion does not end with its box)
    assert st_q.rewards == {pid: [1.5, 0.5, 0.5, 0.5] for pid in st_q.rewards}
    assert st_i.rewards == {pid: [0.5, 0.5, 0.5, 1.0] for pid in st_i.rewards}
    assert set(st_q.labels.values()) == {"3"}  # the labels are the main reward's


def test_builtin_format_and_length_rewards(clean_rewards):
    cfg = load_config(
        TINY_COHORT,
        [*TINY, "reward.name=ttrl", "reward.combine=[{name: format, weight: 1}, {name: length, weight: 2}]"],
    )
    cohort = Cohort.from_config(cfg)
    for agent in cohort.agents:
        agent.engine = ForcedTexts(agent.engine, lambda pid, j, c: ["\\boxed{4}", "no"][j % 2])
    cohort.step()
    st = cohort.last[0]
    for pid, rollout in zip(st.rewards, st.rollouts):
        lengths = [len(c.ids) for c in rollout.completions]
        # ttrl: label 4 (two votes of two answers) → 1 for the boxed ones; format 1 for them too
        want = [(2.0 if j % 2 == 0 else 0.0) - 2 * n / 6 for j, n in enumerate(lengths)]
        assert st.rewards[pid] == pytest.approx(want)


def test_entry_point_rewards_are_names_for_reward_name_and_baseline(tmp_path, clean_rewards, monkeypatch):
    python, _ = _documented_example(ROOT / "README.md")
    (tmp_path / "ep_rewards.py").write_text(python)
    dist = tmp_path / "ep_rewards-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-rewards\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[corl_vl.rewards]\nep_format = ep_rewards:boxed_format\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.rescan_entry_points()
    assert "ep_format" in registry.reward_names()
    assert load_config(TINY_COHORT, [*TINY, "reward.name=ep_format"]).reward.name == "ep_format"  # --baseline


def test_bad_plugins_are_one_line_errors(tmp_path, clean_rewards):
    with pytest.raises(CorlError, match=r"reward\.module: expected path/to/file\.py:function"):
        load_config(TINY_COHORT, [*TINY, "reward.module=nofunction.py"])
    (tmp_path / "broken.py").write_text("raise ValueError('oops')\n")
    with pytest.raises(CorlError, match=r"broken\.py failed to load: ValueError: oops"):
        load_config(TINY_COHORT, [*TINY, f"reward.module={tmp_path}/broken.py:fn"])
    with pytest.raises(CorlError, match=r"reward\.combine\.0\.name: must be one of"):
        load_config(TINY_COHORT, [*TINY, "reward.combine=[{name: nope, weight: 1}]"])
    with pytest.raises(CorlError, match=r"reward\.combine: 'co_rl' votes or keeps state"):
        Cohort.from_config(load_config(TINY_COHORT, [*TINY, "reward.combine=[{name: co_rl}]"]))


def test_add_weighted_worked_example():
    total = {"a": {"p": [1.0, 0.0]}}
    assert add_weighted(total, {"a": {"p": [1.0, 0.5]}}, 0.5) == {"a": {"p": [1.5, 0.25]}}
    with pytest.raises(CorlError, match=r"reward\.combine"):
        add_weighted(total, {"a": {"p": [1.0]}}, 1.0)


def test_a_combined_gold_reward_needs_golds_before_any_model_loads(tmp_path):
    import json

    from corl_vl.train.preflight import check_data

    data = tmp_path / "unlabelled.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"{i} + 1 = ?"}) + "\n" for i in range(4)))
    cfg = load_config(TINY_COHORT, [*TINY, f"data.train={data}", "reward.combine=[{name: gt, weight: 0.1}]"])
    with pytest.raises(CorlError, match="needs a gold answer"):
        check_data(cfg)
