"""A mixed cohort from pictures: Qwen2.5-VL + InternVL3.5 (built in) + SmolVLM (the outside plugin), 2 steps.

Random tiny models never write a parseable answer, so — as ``corl-vl demo`` does — every agent starts from a
warm-started base (short supervised run on labelled synthetic pictures, cached): Qwen2.5-VL and InternVL3.5
with the demo's own ``--fast`` recipe (the same cache entries), SmolVLM with one of its own. Nothing below forces
an answer: labels are the peers' real majority votes, rewards follow from them, and every agent must get labels,
train rows and move its vision tower. ``corl-vl adapters check`` passes on all three bases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from adapter_families import activate_example_plugins

from corl_vl.cli import main as cli_main
from corl_vl.cli.demo import FAST_WARM_START
from corl_vl.config import apply_overrides, config_from_dict
from corl_vl.science.toy import base_specs, build_cohort, load_experiment, train_problems
from corl_vl.science.warm_start import WarmStartSpec, ensure_warm_start
from model_adapters import registry

DEMO = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"
STEPS = 2


@pytest.fixture(scope="module")
def bases() -> dict[str, Path]:
    activate_example_plugins()
    exp = load_experiment(DEMO)
    demo = base_specs(exp, **FAST_WARM_START)  # qwen strong on figure_color, internvl on ground_color
    smol = WarmStartSpec(
        model=str(registry.get_adapter_class("smolvlm").tiny_checkpoint()),
        strong_skills=tuple(exp.skills), **{**exp.warm_start, **FAST_WARM_START},
    )  # fmt: skip
    specs = {"qwen": demo[0], "internvl": demo[1], "smol": smol}
    return {name: ensure_warm_start(spec) for name, spec in specs.items()}


def test_adapters_check_passes_on_every_base(bases):
    for name, folder in bases.items():
        assert cli_main(["adapters", "check", str(folder)]) == 0, name


def test_two_steps_every_agent_labelled_trained_and_its_vision_tower_moved(bases):
    exp = load_experiment(DEMO)
    raw = {
        **exp.cohort,
        "agents": [{"name": name, "model": str(folder)} for name, folder in bases.items()],
        "topology": {"kind": "all_peers"},  # each agent is labelled by the majority of the other two
    }
    cfg = apply_overrides(
        config_from_dict(raw, str(DEMO)),
        [f"train.max_steps={STEPS}", "train.plot=false", "data.problems_per_step=6", "train.lr=1e-3"],
    )
    torch.manual_seed(cfg.train.seed)
    cohort = build_cohort(cfg, train_problems(cfg, exp.skills, text_view=False))
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
