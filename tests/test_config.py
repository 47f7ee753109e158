"""Cohort config: every shipped YAML loads; overrides are typed; bad keys/values fail with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corl_vl.config import CohortConfig, apply_overrides, config_from_dict, load_config, pair_config, to_dict
from corl_vl.errors import CorlError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
YAMLS = sorted(CONFIGS.rglob("*.yaml"))
# accelerate/ holds launcher configs and science/ experiment files (a cohort section plus warm start and
# held-out evaluation, loaded and tested by corl_vl.science.toy), as is demo.yaml (warm-started bases, see
# tests/test_faults.py); everything else is a cohort config.
COHORT_YAMLS = [p for p in YAMLS if p.parent.name not in ("accelerate", "science") and p.name != "demo.yaml"]
TINY_COHORT = Path(__file__).resolve().parent / "fixtures" / "tiny_cohort.yaml"


def test_configs_exist():
    names = {p.relative_to(CONFIGS).as_posix() for p in COHORT_YAMLS}
    assert {
        "pairs/qwen2.5-vl-3b_internvl3.5-2b.yaml",
        "pairs/qwen2.5-vl-7b_internvl3.5-8b.yaml",
        "pairs/gemma-3-12b_internvl3.5-8b.yaml",
        "pairs/qwen2.5-3b_llama-3.2-3b.yaml",
        "pairs/ring3_qwen2.5-3b_llama-3.2-3b_qwen3-1.7b.yaml",
        "pairs/different-family-plus_rephrased.yaml",
    } <= names


@pytest.mark.parametrize("path", COHORT_YAMLS, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_every_cohort_yaml_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, CohortConfig) and len(cfg.agents) >= 2


def test_paper_hyperparameters_in_pairs():
    vlm = load_config(CONFIGS / "pairs/qwen2.5-vl-3b_internvl3.5-2b.yaml")
    assert (vlm.grpo.k, vlm.grpo.max_new_tokens, vlm.data.problems_per_step) == (4, 512, 8)
    assert (vlm.train.lr, vlm.train.warmup_ratio, vlm.train.adam_betas, vlm.train.grad_clip) == (
        1e-6,
        0.03,
        (0.9, 0.95),
        1.0,
    )
    text = load_config(CONFIGS / "pairs/qwen2.5-3b_llama-3.2-3b.yaml")
    assert (text.grpo.k, text.grpo.max_new_tokens, text.data.problems_per_step) == (8, 1024, 16)
    ring = load_config(CONFIGS / "pairs/ring3_qwen2.5-3b_llama-3.2-3b_qwen3-1.7b.yaml")
    assert ring.reward.topology == "ring" and len(ring.agents) == 3
    plus = load_config(CONFIGS / "pairs/different-family-plus_rephrased.yaml")
    assert [a.data_view for a in plus.agents] == [None, "data/math-l3-5-rephrased"]


def test_overrides_are_typed():
    cfg = load_config(
        TINY_COHORT,
        [
            "grpo.k=2",
            "train.lr=3e-5",
            "grpo.epsilon_high=0.28",
            "agents.1.lr=1e-3",
            "agents.qwen.data_view=x.jsonl",
            "train.adam_betas=[0.8, 0.9]",
            "grpo.epsilon_high=null",
            "agents.0.adapter_kwargs.dtype=bfloat16",
        ],
    )
    assert cfg.grpo.k == 2 and isinstance(cfg.grpo.k, int)
    assert cfg.train.lr == 3e-5 and isinstance(cfg.train.lr, float)  # YAML reads "3e-5" as a string
    assert cfg.grpo.epsilon_high is None
    assert cfg.agents[1].lr == 1e-3 and cfg.agents[0].data_view == "x.jsonl"
    assert cfg.train.adam_betas == (0.8, 0.9)
    assert cfg.agents[0].adapter_kwargs["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.epsilom=0.3", "unknown key 'epsilom'"),
        ("grpo.k=four", "grpo.k: expected int"),
        ("grpo.k=0", "grpo.k: must be ≥ 1"),
        ("reward.name=magic", "reward.name: must be one of"),
        ("rollout.engine=sglang", "rollout.engine"),
        ("agents.7.lr=1", "no element '7'"),
        ("train.seed", "expects key=value"),
        ("train.adam_betas=[0.9]", "train.adam_betas: expected tuple"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(CorlError, match=message):
        load_config(TINY_COHORT, [override])


def test_bad_yaml_names_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  - {name: a, model: m}\n  - {name: b, model: n}\ngrpo:\n  temprature: 0.7\n")
    with pytest.raises(CorlError, match=r"unknown key 'grpo.temprature' \(in .*bad.yaml\)"):
        load_config(bad)
    bad.write_text("agents:\n  - {name: a, model: m, lr: fast}\n  - {name: b, model: n}\n")
    with pytest.raises(CorlError, match=r"agents.0.lr: expected float or null, got 'fast' \(in .*bad.yaml\)"):
        load_config(bad)
    bad.write_text("agents: [a: 1\n")
    with pytest.raises(CorlError, match=r"invalid YAML in .*bad\.yaml"):
        load_config(bad)
    with pytest.raises(CorlError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_cross_field_checks():
    one = {"agents": [{"model": "tiny-qwen2.5"}]}
    with pytest.raises(CorlError, match="Co-RL needs at least two agents"):
        config_from_dict(one)
    cfg = config_from_dict({**one, "train": {"reward": "ttrl"}})
    assert cfg.agents[0].name == "tiny-qwen2.5"
    three = {"agents": [{"name": n, "model": "m"} for n in "abc"]}
    with pytest.raises(CorlError, match="mutual needs exactly 2 agents"):
        config_from_dict(three)
    with pytest.raises(CorlError, match="names must be unique"):
        config_from_dict({"agents": [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}]})
    with pytest.raises(CorlError, match=r"unknown agent\(s\) \['z'\]"):
        config_from_dict({**three, "reward": {"topology": "graph", "edges": {"a": ["z"]}}})


def test_pair_config():
    cfg = pair_config(["tiny-qwen2.5", "tiny-llama3", "tiny-qwen3"], ["grpo.k=2"])
    assert cfg.agent_names() == ["tiny-qwen2.5", "tiny-llama3", "tiny-qwen3"]
    assert cfg.reward.topology == "ring" and cfg.grpo.k == 2
    assert pair_config(["tiny-qwen2.5", "tiny-qwen2.5"]).agent_names() == ["tiny-qwen2.5", "tiny-qwen2.5-2"]
    with pytest.raises(CorlError, match="--pair needs"):
        pair_config(["tiny-qwen2.5"])


def test_old_reward_keys_load_with_one_warning_each(caplog):
    """train.reward / train.peer_reward / topology.* moved into the reward section; old files and --set keys
    still load into the same config."""
    agents = [{"name": "a", "model": "m"}, {"name": "b", "model": "n"}, {"name": "c", "model": "o"}]
    old = {
        "agents": agents,
        "topology": {"kind": "all_peers", "weighting": "agreement", "ties": "first"},
        "train": {"reward": "co_rl", "peer_reward": "soft", "lr": 2e-6},
    }
    new = {
        "agents": agents,
        "reward": {"name": "co_rl", "topology": "all_peers", "weighting": "agreement", "ties": "first"},
        "train": {"lr": 2e-6},
    }
    new["reward"]["peer_reward"] = "soft"
    with caplog.at_level("WARNING", logger="corl_vl"):
        migrated = config_from_dict(old)
    assert to_dict(migrated) == to_dict(config_from_dict(new))
    moved = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(moved) == 5 and any("'topology.kind' is deprecated; use 'reward.topology'" in m for m in moved)
    cfg = apply_overrides(config_from_dict(new), ["train.reward=ttrl", "topology.kind=ring"])
    assert (cfg.reward.name, cfg.reward.topology) == ("ttrl", "ring")
    with pytest.raises(CorlError, match=r"train\.reward and reward\.name disagree"):
        config_from_dict({**old, "reward": {"name": "ttrl"}})


def test_old_experiment_layout_loads_as_the_experiment_section(tmp_path):
    root = CONFIGS.parent
    current = load_config(root / "configs/demo.yaml")
    new = yaml.safe_load((root / "configs/demo.yaml").read_text())
    old = {
        "warm_start": new["experiment"]["warm_start"],
        "heldout": new["experiment"]["heldout"],
        "cohort": {k: v for k, v in new.items() if k != "experiment"},
    }
    old["cohort"]["topology"] = {"kind": old["cohort"].pop("reward")["topology"]}
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(old))
    assert to_dict(load_config(path)) == to_dict(current)


def test_experiment_section_is_checked_before_models_load():
    base = {"agents": [{"name": "a", "model": "tiny-qwen2.5-vl"}, {"name": "b", "model": "tiny-internvl3.5"}]}
    cases = [
        ({"warm_start": {"skill_sets": [["figure_color"]]}}, "1 skill sets for 2 agents"),
        ({"warm_start": {"skill_sets": [["figure_color"], []]}}, "agent b has no skills"),
        (
            {"warm_start": {"skill_sets": [["figure_color"], ["ground_color"]], "stepz": 3}},
            "warm_start.stepz",
        ),
        (
            {
                "warm_start": {"skill_sets": [["figure_color"], ["ground_color"]]},
                "agents": {"zed": {"steps": 1}},
            },
            "experiment.agents.zed: no such agent",
        ),
    ]
    for experiment, match in cases:
        with pytest.raises(CorlError, match=match):
            config_from_dict({**base, "experiment": experiment})
    with pytest.raises(CorlError, match=r"select_best.*set eval\.every"):
        config_from_dict({**base, "eval": {"select_best": "peer_agreement"}})


def test_every_shipped_config_loads():
    paths = [CONFIGS / "demo.yaml", *CONFIGS.glob("pairs/*.yaml"), *CONFIGS.glob("science/*.yaml")]
    assert len(paths) >= 10
    for path in paths:
        load_config(path)


def test_synthetic_validation_split_is_checked_before_models_load():
    # the default split, validation, exists: eval.every works without naming the (leaking) test split
    assert load_config(TINY_COHORT, ["eval.every=1"]).eval.split == "validation"
    with pytest.raises(
        CorlError, match=r"eval\.split: synthetic data has the splits train, validation, test"
    ):
        load_config(TINY_COHORT, ["eval.every=1", "eval.split=dev"])
    assert load_config(TINY_COHORT, ["eval.every=1", "eval.split=test"]).eval.split == "test"


def test_an_agent_may_name_its_own_strong_and_weak_skills():
    # two agents strong on the same skill (the diversity cohorts): the cohort's skills stay both, agent b's spec
    # is strong on the circle and weak on the background, as agent a's
    from corl_vl.experiment import warm_start_specs

    base = {"agents": [{"name": "a", "model": "tiny-qwen2.5-vl"}, {"name": "b", "model": "tiny-qwen2.5-vl"}]}
    own = {"b": {"strong_skills": ["figure_color"], "weak_skills": ["ground_color"]}}
    sets = {"skill_sets": [["figure_color"], ["ground_color"]]}
    cfg = config_from_dict({**base, "experiment": {"warm_start": sets, "agents": own}})
    a, b = warm_start_specs(cfg)
    assert cfg.experiment.skills == ["figure_color", "ground_color"]
    assert (b.strong_skills, b.weak_skills) == (("figure_color",), ("ground_color",))
    assert b == a and b.key() == a.key()  # the same warm start twice: one cached folder
    with pytest.raises(CorlError, match=r"experiment\.agents\.b\.weak_skills: must be a list of the cohort"):
        config_from_dict(
            {**base, "experiment": {"warm_start": sets, "agents": {"b": {"weak_skills": ["x"]}}}}
        )
    with pytest.raises(CorlError, match=r"experiment\.warm_start\.strong_skills"):
        config_from_dict({**base, "experiment": {"warm_start": {**sets, "strong_skills": ["figure_color"]}}})
    for cohort_wide in ("contested_skills", "skill_sets"):  # the cohort's, not one agent's
        with pytest.raises(CorlError, match=rf"experiment\.agents\.b\.{cohort_wide}: unknown key"):
            config_from_dict(
                {**base, "experiment": {"warm_start": sets, "agents": {"b": {cohort_wide: ["figure_color"]}}}}
            )
