"""GPU-only defaults (corl_vl/train/training_defaults.py): gradient checkpointing on for a CUDA device when
``train.gradient_checkpointing`` is unset, and every dropout probability zeroed at the start of training.

The dropout test runs a tiny InternVL3.5 whose config turns dropout on in the vision tower (hidden and attention)
and the language model (attention): zeroed, two forwards in train mode agree; left on, they differ."""

from __future__ import annotations

import json
import shutil

import torch

from corl_vl.config import TrainConfig, config_from_dict
from corl_vl.data.synth import generate_problems
from corl_vl.train.agent import Agent, AgentSettings
from corl_vl.train.training_defaults import apply_training_defaults, checkpointing_on
from model_adapters.registry import create_adapter


def test_checkpointing_default_follows_the_device():
    assert checkpointing_on(None, "cuda:1") and checkpointing_on(None, "cuda")
    assert not checkpointing_on(None, "cpu")
    assert checkpointing_on(True, "cpu") and not checkpointing_on(False, "cuda:0")
    adapter = create_adapter("tiny-qwen2.5")
    for device, on in (("cuda:0", True), ("cpu", False)):
        model = adapter.load_model()  # on the CPU: the device named is the one the agent would train on
        apply_training_defaults(model, TrainConfig(), device)
        assert model.is_gradient_checkpointing is on, device


def _dropout_checkpoint(tiny_checkpoint, tmp_path):
    folder = tmp_path / "internvl-dropout"
    shutil.copytree(tiny_checkpoint("tiny-internvl3.5"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"].update(hidden_dropout_prob=0.3, attention_dropout=0.3, projection_dropout=0.3)
    config["text_config"]["attention_dropout"] = 0.3
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _agent(folder, adapter_name, **train):
    cfg = config_from_dict(
        {
            "agents": [{"name": "v", "model": str(folder), "adapter": adapter_name}],
            "reward": {"name": "rent"},
            "train": train,
        }
    )
    view = generate_problems(2, seed=3)
    return Agent.from_config(cfg.agents[0], AgentSettings.of(cfg), view, device="cpu"), view


def _two_forwards(agent, view):
    prompts = [agent.adapter.encode_prompt(p) for p in view]
    completions = [[11, 12, 13, 14], [15, 16, 17]]
    agent.model.train()
    with torch.no_grad():
        return [
            agent.adapter.completion_logprobs(agent.model, prompts, completions).logprobs for _ in range(2)
        ]


def test_dropout_is_zeroed_at_the_start_of_training(tiny_checkpoint, tmp_path):
    folder = _dropout_checkpoint(tiny_checkpoint, tmp_path)
    name = create_adapter("tiny-internvl3.5").name
    kept, view = _agent(folder, name, disable_dropout=False)
    first, second = _two_forwards(kept, view)
    assert not torch.equal(first, second)  # the config's dropout is live in train mode
    zeroed, view = _agent(folder, name)  # train.disable_dropout defaults to true
    dropouts = [m.p for m in zeroed.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and set(dropouts) == {0.0}
    rates = [
        v for m in zeroed.model.modules() for k, v in vars(m).items() if "dropout" in k and type(v) is float
    ]
    assert rates and set(rates) == {0.0}
    first, second = _two_forwards(zeroed, view)
    torch.testing.assert_close(first, second)
    assert not zeroed.model.is_gradient_checkpointing  # unset on a CPU: off
