"""SmolVLM, added from outside: the example package ``examples/adapters/smolvlm`` pip-installed into a private
target (tests/adapter_families.py), found through the ``corl_vl.adapters`` entry point, detected from its
checkpoint, checked by ``corl-vl adapters check`` and trained in a cohort. The shared adapter tests
(test_adapters_*.py) run over it as ``plugin:smolvlm`` too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from adapter_families import PLUGINS, activate_example_plugins, family_adapter
from PIL import Image
from test_cohort import TINY, ForcedTexts, boxed

from corl_vl.cli import main as cli_main
from corl_vl.config import apply_overrides, config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.train.cohort import Cohort
from model_adapters import registry


def _smolvlm_checkpoint() -> Path:
    return registry.get_adapter_class("smolvlm").tiny_checkpoint()


def test_registered_through_the_entry_point_from_the_installed_package():
    folders = activate_example_plugins()
    assert "plugin:smolvlm" in PLUGINS
    cls = registry.get_adapter_class("smolvlm")
    assert registry.adapter_origin("smolvlm") == "corl-vl-smolvlm"
    assert cls.__module__ == "corl_vl_smolvlm.adapter"
    module_file = Path(sys.modules[cls.__module__].__file__)
    assert any(module_file.is_relative_to(f) for f in folders)  # the installed copy, not the source
    assert registry.detect_adapter(_smolvlm_checkpoint()) == "smolvlm"


def test_adapters_check_passes_on_its_checkpoint(capsys):
    assert cli_main(["adapters", "check", str(_smolvlm_checkpoint()), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["adapter"] == "smolvlm" and report["ok"]
    image = next(p for p in report["prompts"] if p["images"] == 1)
    assert image["image_tokens"] > 0 and image["bos_count"] == 1  # the template's own <|im_start|>, once


def test_prompt_layout_is_smolvlm2s():
    adapter = family_adapter("plugin:smolvlm", system_prompt="Be brief.")
    problem = Problem(
        "q", "Which is bigger?", images=[Image.new("RGB", (90, 60), "red")], choices=["3/4", "0.7"]
    )
    question = "Which is bigger?\nA. 3/4\nB. 0.7 Please reason step by step, and put your final answer within \\boxed{}."
    assert adapter.render_prompt(problem)[0] == (
        f"<|im_start|>System: Be brief.<end_of_utterance>\nUser:<image>{question}<end_of_utterance>\nAssistant:"
    )


def _image(size: tuple[int, int], seed: int) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(
        torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    )


def test_prompts_with_different_crop_counts_batch_like_one_by_one():
    """A wide image splits into fewer crops than a square one; collate_mm lays crops out along dim 0, so the
    batch scores every row exactly as alone (stacking [1, crops, …] tensors would fail outright)."""
    adapter = family_adapter("plugin:smolvlm")
    prompts = [
        adapter.encode_prompt(Problem("wide", "How many bars?", images=[_image((200, 20), 1)])),
        adapter.encode_prompt(Problem("square", "What colour?", images=[_image((90, 80), 2)])),
        adapter.encode_prompt(Problem("text", "Compute 7*6.")),
    ]
    crops = [p.mm_inputs["pixel_values"].shape[1] for p in prompts[:2]]
    assert crops[0] != crops[1], crops
    completions = [[11, 12, 13], [14, 15], [16, 17, 18, 19]]
    model = adapter.load_model()
    with torch.no_grad():
        batched = adapter.completion_logprobs(model, prompts, completions)
        for i, (p, c) in enumerate(zip(prompts, completions)):
            single = adapter.completion_logprobs(model, [p], [c])
            assert torch.allclose(batched.logprobs[i, : len(c)], single.logprobs[0], atol=1e-4, rtol=0), i


def test_trains_in_a_cohort_with_a_built_in_family():
    raw = {
        "agents": [
            {"name": "smol", "model": str(_smolvlm_checkpoint())},  # detected as smolvlm from its config
            {"name": "qwen", "model": "tiny-qwen2.5-vl"},
        ],
        "reward": {"topology": "mutual"},
        "data": {"train": "synthetic", "limit": 4, "problems_per_step": 2},
        "grpo": {"k": 4, "max_new_tokens": 6},
        "rollout": {"engine": "hf"},
        "train": {"max_steps": 1, "output_dir": "unused"},
    }
    cohort = Cohort.from_config(apply_overrides(config_from_dict(raw), TINY))
    smol, qwen = cohort.agents
    assert smol.adapter.name == "smolvlm"
    smol.engine = ForcedTexts(smol.engine, boxed(3, 5, 5, 5))
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 3, 3, 5))
    vision = smol.adapter.vision_parameter_names(smol.model)
    assert vision and all(n.startswith(("model.vision_model.", "model.connector.")) for n in vision)
    before = {n: p.detach().clone() for n, p in smol.model.named_parameters()}
    metrics = cohort.step()
    assert metrics["smol"]["label/coverage"] == 1.0 and metrics["smol"]["trained_rows"] == 8.0
    after = dict(smol.model.named_parameters())
    assert any(not torch.equal(after[n].detach(), before[n]) for n in vision)
