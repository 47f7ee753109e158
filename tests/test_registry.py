"""The adapter registry: built-ins, a real entry-point plugin installed with pip, presets, folder detection, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corl_vl.errors import CorlError
from model_adapters import registry
from model_adapters.base import ModelAdapter
from model_adapters.causal_lm import CausalLMAdapter
from model_adapters.presets import all_presets

PLUGIN_SRC = Path(__file__).parent / "plugin_pkg"
BUILTINS = {"qwen2_5_vl", "internvl3_5", "gemma3", "causal_lm"}


@pytest.fixture
def clean_registry():
    """Registry state restored after the test (plugins or test classes registered inside do not leak)."""
    registry.list_adapters()
    saved = dict(registry._ADAPTERS), dict(registry._ORIGIN), registry._loaded
    yield registry
    registry._ADAPTERS.clear()
    registry._ADAPTERS.update(saved[0])
    registry._ORIGIN.clear()
    registry._ORIGIN.update(saved[1])
    registry._loaded = saved[2]


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory) -> Path:
    """The test plugin package pip-installed (its own pyproject, no corl-vl edits) into a private target dir."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "src"
    shutil.copytree(
        PLUGIN_SRC, source
    )  # build in a copy: setuptools writes build/ and egg-info next to sources
    target = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
    )
    return target


def test_builtins_registered_with_their_names():
    adapters = registry.list_adapters()
    assert set(adapters) >= BUILTINS
    for name in BUILTINS:
        assert adapters[name].name == name
        assert registry.adapter_origin(name) == "built-in"
    # every preset names an adapter that exists
    assert {p.adapter for p in all_presets().values()} <= set(adapters)


def test_unknown_adapter_lists_what_exists():
    with pytest.raises(CorlError) as err:
        registry.get_adapter_class("qwen9")
    message = str(err.value)
    assert "unknown adapter 'qwen9'" in message
    assert all(name in message for name in BUILTINS)
    assert "\n" not in message


def test_unknown_model_spec_is_one_clear_error():
    with pytest.raises(CorlError, match=r"unknown model 'no-such-model'.*presets: .*tiny-qwen2\.5-vl"):
        registry.create_adapter("no-such-model")
    with pytest.raises(CorlError, match="unknown adapter 'nope'"):
        registry.create_adapter("org/some-hub-model", adapter="nope")


def test_duplicate_name_rejected(clean_registry):
    with pytest.raises(CorlError, match="adapter name 'causal_lm' registered twice"):

        @registry.register_adapter("causal_lm")
        class Impostor(CausalLMAdapter):
            pass

    assert registry.get_adapter_class("causal_lm") is CausalLMAdapter


def test_register_new_name_and_reject_non_adapters(clean_registry):
    @registry.register_adapter("my-family")
    class MyFamily(CausalLMAdapter):
        pass

    assert registry.get_adapter_class("my-family") is MyFamily and MyFamily.name == "my-family"
    with pytest.raises(CorlError, match="not a ModelAdapter subclass"):
        registry.register_adapter("not-one")(dict)
    with pytest.raises(CorlError, match="invalid adapter name"):
        registry.register_adapter("bad name!")


def test_unknown_family_option_is_an_error():
    with pytest.raises(CorlError, match="unknown option"):
        registry.get_adapter_class("causal_lm")("unused/path", crop_to_patches=True)
    with pytest.raises(CorlError, match="unknown dtype"):
        registry.get_adapter_class("causal_lm")("unused/path", dtype="float8")


def test_local_folder_detected_by_model_type(tmp_path):
    expected = {
        "qwen2_5_vl": "qwen2_5_vl",
        "internvl": "internvl3_5",
        "gemma3": "gemma3",
        "llama": "causal_lm",
    }
    for model_type, adapter in expected.items():
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert registry.detect_adapter(folder) == adapter
        name, path, _ = registry.resolve_model(folder)
        assert (name, path) == (adapter, str(folder))
    # an explicit adapter wins over detection
    assert registry.resolve_model(tmp_path / "llama", adapter="gemma3")[0] == "gemma3"


def test_folder_errors_name_the_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(
        CorlError, match=r"config\.json: no adapter for model_type 'mamba'; supported: .*qwen2_5_vl"
    ):
        registry.detect_adapter(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CorlError, match=r"config\.json: cannot read field 'model_type'"):
        registry.detect_adapter(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CorlError, match=r"config\.json: not found"):
        registry.detect_adapter(empty)


def test_preset_resolves_tiny_checkpoint(tiny_checkpoint):
    adapter = registry.create_adapter("tiny-qwen2.5", answer_format="none")
    assert type(adapter) is CausalLMAdapter
    assert Path(adapter.model_path) == tiny_checkpoint("tiny-qwen2.5")
    assert adapter.answer_format == "none"


def test_entry_point_plugin_discovered_and_usable(
    installed_plugin, clean_registry, monkeypatch, tiny_checkpoint
):
    import torch

    from corl_vl.data.problem import Problem

    monkeypatch.syspath_prepend(str(installed_plugin))
    with pytest.raises(CorlError, match="unknown adapter 'plain_lm'"):
        registry.get_adapter_class("plain_lm")  # not installed on this path yet
    registry.reload_plugins()
    cls = registry.get_adapter_class("plain_lm")
    assert issubclass(cls, ModelAdapter) and cls.__module__ == "corl_vl_test_plugin"
    assert registry.adapter_origin("plain_lm") == "corl-vl-test-plugin"
    assert Path(sys.modules["corl_vl_test_plugin"].__file__).is_relative_to(installed_plugin)

    # usable end to end: a preset's weights driven by the plugin's prompt format
    adapter = registry.create_adapter("tiny-qwen2.5", adapter="plain_lm")
    problem = Problem("p1", "What is 2+3?", choices=["4", "5"])
    prompt = adapter.encode_prompt(problem)
    expected = "Question: What is 2+3?\nA. 4\nB. 5 Please reason step by step, and put your final answer within \\boxed{}.\nAnswer:"
    assert prompt.prompt_text == expected
    assert prompt.prompt_ids == adapter.tokenizer(expected)["input_ids"]
    model = adapter.load_model()
    with torch.no_grad():
        out = adapter.completion_logprobs(model, [prompt], [[5, 6, 7]])
        logits = model(torch.tensor([[*prompt.prompt_ids, 5, 6]])).logits[0, -3:]
    expected_lp = torch.log_softmax(logits, -1)[torch.arange(3), torch.tensor([5, 6, 7])]
    assert torch.allclose(out.logprobs[0], expected_lp, atol=1e-5)


def test_cli_lists_plugin_end_to_end(installed_plugin):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(installed_plugin), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "corl_vl", "adapters", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    rows = {row["adapter"]: row for row in json.loads(result.stdout)}
    assert rows["plain_lm"]["origin"] == "corl-vl-test-plugin"
    assert rows["plain_lm"]["class"] == "corl_vl_test_plugin.PlainPromptAdapter"
    assert (
        rows["gemma3"]["is_cap"] == "2" and rows["qwen2_5_vl"]["is_cap"] == "2"
    )  # every family declares 2.0
    assert "tiny-qwen2.5-vl" in rows["qwen2_5_vl"]["presets"]

    table = subprocess.run(
        [sys.executable, "-m", "corl_vl", "adapters", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=Path(__file__).parent.parent,
    ).stdout
    assert "plain_lm" in table and "corl-vl-test-plugin" in table


def test_broken_plugin_names_itself(tmp_path, clean_registry, monkeypatch):
    dist = tmp_path / "broken_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[corl_vl.adapters]\nbroken = no_such_module_xyz:Adapter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reload_plugins()
    with pytest.raises(CorlError, match=r"adapter plugin 'broken' from broken-plugin .*failed to load"):
        registry.list_adapters()


def test_hub_id_family_is_read_from_its_config_in_the_hf_cache(tmp_path, tiny_checkpoint):
    """A hub id needs no explicit adapter: its config.json (here planted in the HF cache, read offline) says."""
    import shutil

    from huggingface_hub import constants

    from model_adapters.registry import resolve_model

    repo = f"corl-vl-test/planted-{tmp_path.name}"
    root = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)
    shutil.copy(tiny_checkpoint("tiny-internvl3.5") / "config.json", snapshot / "config.json")
    try:
        assert resolve_model(repo) == ("internvl3_5", repo, {})
        assert resolve_model(repo, adapter="causal_lm")[0] == "causal_lm"  # explicit wins
    finally:
        shutil.rmtree(root)
    with pytest.raises(CorlError, match=r"cannot read config\.json of hub id .*pass the adapter explicitly"):
        resolve_model("corl-vl-test/never-downloaded")  # offline (HF_HUB_OFFLINE=1 in tests): one clear line
    with pytest.raises(CorlError, match=r"not a preset, not a local folder, not a hub id"):
        resolve_model("a/b/c")
