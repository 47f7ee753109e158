"""A mixed cohort from pictures: Qwen2.5-VL + InternVL3.5 (built in) + SmolVLM (the outside plugin), 2 steps.

Random tiny models never write a parseable answer, so — as ``corl-vl demo`` does — every agent starts from a
warm-started base (short supervised run on labelled synthetic pictures, cached): Qwen2.5-VL and InternVL3.5
with the demo's own bases (the same cache entries), SmolVLM with a short warm start of its own. Nothing below forces
an answer: labels are the peers' real majority votes, rewards follow from them, and every agent must get labels,
train rows and move its vision tower. ``corl-vl adapters check`` passes on all three bases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from adapter_families import activate_example_plugins

from corl_vl.cli import main as cli_main
from corl_vl.config import apply_overrides, finalize, load_config
from corl_vl.experiment import Experiment, resolve
from corl_vl.recipe import build_cohort
from corl_vl.train.cohort_data import load_base_problems
from model_adapters import registry

DEMO = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"
STEPS = 2


@pytest.fixture(scope="module")
def config():
    """The demo's experiment with a third agent, the plugin's SmolVLM, strong on both skills; every agent
    starts from its warm-started base (the built-ins share the cache entries of ``corl-vl demo``)."""
    activate_example_plugins()
    cfg = load_config(DEMO)
    exp = cfg.experiment
    exp.warm_start["skill_sets"] = [*exp.warm_start["skill_sets"], []]
    # no skill set of its own: strong on every skill, from a short warm start (a base only this test uses)
    exp.agents["smol"] = {"labels_per_skill": 128, "steps": 60}
    smol = registry.get_adapter_class("smolvlm").tiny_checkpoint()
    cfg.agents.append(type(cfg.agents[0])(name="smol", model=str(smol)))
    overrides = [
        "reward.topology=all_peers",  # each agent is labelled by the majority of the other two
        f"train.max_steps={STEPS}",
        "train.plot=false",
        "data.problems_per_step=6",
        "train.lr=1e-3",
    ]
    return resolve(finalize(apply_overrides(cfg, overrides), "test_mixed_cohort"))


def test_adapters_check_passes_on_every_base(config):
    for agent in config.agents:
        assert cli_main(["adapters", "check", agent.model]) == 0, agent.name


def test_two_steps_every_agent_labelled_trained_and_its_vision_tower_moved(config):
    problems = load_base_problems(config.data, Experiment(config.experiment).scope)  # the experiment's skills
    cohort = build_cohort(config, device="cpu", problems=problems)
    assert [a.adapter.name for a in cohort.agents] == ["qwen2_5_vl", "internvl3_5", "smolvlm"]
    assert all(p.images for p in cohort.base.values())  # from pictures
    vision = {a.name: a.adapter.vision_parameter_names(a.model) for a in cohort.agents}
    before = {a.name: {n: p.detach().clone() for n, p in a.model.named_parameters()} for a in cohort.agents}
    labelled = dict.fromkeys(vision, 0.0)
    trained = dict.fromkeys(vision, 0.0)
    for _ in range(STEPS):
        metrics = cohort.step()
        for name in vision:
            labelled[name] += metrics[name]["label/coverage"]
            trained[name] += metrics[name]["trained_rows"]
    print({"label/coverage summed": labelled, "trained_rows summed": trained})
    for agent in cohort.agents:
        assert labelled[agent.name] > 0 and trained[agent.name] > 0, agent.name
        after = dict(agent.model.named_parameters())
        assert vision[agent.name], agent.name
        moved = [n for n in vision[agent.name] if not torch.equal(after[n].detach(), before[agent.name][n])]
        assert moved, agent.name
