"""vision_use: every parameter of a tiny VLM falls in exactly one part (language model, output head, the vision
modules), and the relative change is reported for the part that moved and only for it."""

from __future__ import annotations

import pytest
import torch

from corl_vl.science.vision_use import HEAD, TEXT, parameter_groups, relative_change, snapshot, vision_groups


@pytest.mark.parametrize(
    ("preset", "vision"),
    [
        ("tiny-qwen2.5-vl", {"model.visual"}),
        ("tiny-internvl3.5", {"model.vision_tower", "model.multi_modal_projector"}),
    ],
)
def test_parts_partition_the_parameters_and_changes_are_attributed(preset, vision, tiny_checkpoint):
    from model_adapters.registry import create_adapter

    model = create_adapter(str(tiny_checkpoint(preset))).load_model()
    groups = parameter_groups(model)
    assert set(groups) == {TEXT, HEAD} | vision
    names = [n for group in groups.values() for n in group]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each parameter exactly once
    before = snapshot(model)
    assert all(v == 0.0 for v in relative_change(before, model).values())
    moved = sorted(vision)[0]
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in groups[moved]:
                param.mul_(1.1)  # a 10 % change of that part only
    change = relative_change(before, model)
    assert change[moved] == pytest.approx(0.1, rel=1e-4)
    assert all(v == 0.0 for k, v in change.items() if k != moved)
    assert set(vision_groups(change)) == vision
