"""The config-validation half of the smoke sweep (benchmarks/smoke/options.py), without loading a model.

The options are enumerated exactly as the sweep does (config dataclasses, registries, argparse parsers). Each
value the sweep tries must build a config or be refused in one line by a CorlError before any model loads, and
the invalid values every number or name can take (NaN, negative, zero where it means nothing, an unknown
choice) must be refused.
"""

from __future__ import annotations

import math
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "smoke"))

import sweep_catalog as catalog  # noqa: E402
import sweep_cli  # noqa: E402

from corl_vl.errors import CorlError  # noqa: E402
from corl_vl.experiment import demo_config  # noqa: E402
from corl_vl.rewards import plugins, registry  # noqa: E402


@pytest.fixture(autouse=True)
def _forget_loaded_rewards(monkeypatch):
    """A swept `reward.module` registers its reward while the config is checked: forget it after each test, so
    another test's file of the same reward name is not refused as a different one."""
    monkeypatch.setattr(registry, "REWARDS", dict(registry.REWARDS))
    monkeypatch.setattr(plugins, "_scanned", False)


OPTIONS = catalog.config_options()
NUMERIC = [o for o in OPTIONS if catalog._strip_optional(o.hint)[0] in (int, float)]
# where 0 means nothing (no step, no token, no learning): must be refused, not run
ZERO_MEANINGLESS = {
    "train.lr",
    "train.max_steps",
    "grpo.k",
    "grpo.epsilon",
    "grpo.temperature",
    "grpo.top_p",
    "grpo.max_new_tokens",
    "grpo.micro_batch_size",
    "data.problems_per_step",
    "rollout.batch_size",
    "experiment.warm_start.steps",
    "experiment.warm_start.lr",
    "experiment.warm_start.batch_size",
    "experiment.warm_start.labels_per_skill",
}
# numbers for which any integer is a valid choice (seeds)
NEGATIVE_ALLOWED = {"seed", "init_seed", "data_seed"}


def _build(key: str, value: object, also: tuple[str, ...] = ()) -> object:
    return demo_config([*catalog.TINY, *also, f"{key}={catalog.format_value(value)}"])


def _one_line_refusal(err: CorlError, key: str) -> None:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    assert key.split(".")[-1] in text, f"the refusal of {key} does not name it: {text}"


def test_the_walk_reaches_every_section_nested_dataclass_and_warm_start_setting():
    keys = {o.key for o in OPTIONS}
    assert {"agents.0.lora", "agents.0.lora.r", "agents.0.adapter_kwargs", "optimizer.offload"} <= keys
    assert {
        "experiment.heldout.every",
        "experiment.warm_start.weak_error_rate",
        "distributed.zero_stage",
    } <= keys
    assert not [o.key for o in OPTIONS if o.skip], "every option has a value rule"
    assert all(o.values for o in OPTIONS)


def test_registry_choices_match_what_the_config_check_accepts():
    """A registry bound to the wrong key would try names the check refuses (or miss some it accepts)."""
    for key, names in catalog.registry_choices().items():
        probed = catalog.probed_choices(key)
        if probed is not None:
            assert sorted(probed) == sorted(names()), key


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.key)
def test_each_value_the_sweep_tries_builds_or_is_refused_in_one_line(option, tmp_path):
    from corl_vl.train.preflight import check_deepspeed, check_models_available

    paths = {"out": str(tmp_path / "run"), "work": str(tmp_path)}
    (tmp_path / "my_rewards.py").write_text(
        "from corl_vl.rewards.registry import StepRewards\n\n\n"
        "def boxed_format(inputs):\n    return StepRewards({}, {})\n"
    )
    for value in option.values:
        if catalog.skip_reason(option.key, value.value):
            continue
        try:
            cfg = demo_config(catalog.overrides(option.key, value, **paths))
            check_deepspeed(cfg.distributed)  # the checks train() makes before any model loads
            check_models_available(cfg)
        except CorlError as err:
            assert "\n" not in str(err) and "Traceback" not in str(err), str(err)


@pytest.mark.parametrize("option", NUMERIC, ids=lambda o: o.key)
def test_non_finite_numbers_are_refused(option):
    also = option.values[0].also if option.values else ()
    for bad in (math.nan, math.inf):
        with pytest.raises(CorlError) as err:
            _build(option.key, bad, also)
        _one_line_refusal(err.value, option.key)


@pytest.mark.parametrize(
    "option",
    [o for o in NUMERIC if o.key.rsplit(".", 1)[1] not in NEGATIVE_ALLOWED],
    ids=lambda o: o.key,
)
def test_negative_numbers_are_refused(option):
    with pytest.raises(CorlError) as err:
        _build(option.key, -1, option.values[0].also if option.values else ())
    _one_line_refusal(err.value, option.key)


@pytest.mark.parametrize("key", sorted(ZERO_MEANINGLESS))
def test_zero_is_refused_where_it_means_nothing(key):
    assert key in {o.key for o in NUMERIC}
    with pytest.raises(CorlError) as err:
        _build(key, 0)
    _one_line_refusal(err.value, key)


@pytest.mark.parametrize(
    "option",
    [
        o
        for o in OPTIONS
        if any(v.why in ("registry", "choice") for v in o.values)
        and o.key not in ("agents.0.model", "agents.0.adapter")
    ],
    ids=lambda o: o.key,
)
def test_unknown_choices_are_refused(option):
    is_list = typing.get_origin(catalog._strip_optional(option.hint)[0]) is list
    with pytest.raises(CorlError) as err:
        _build(option.key, ["no-such-choice"] if is_list else "no-such-choice")
    _one_line_refusal(err.value, option.key)


def test_every_flag_has_values_and_every_sweep_command_parses():
    """The CLI half: each flag of each subcommand is enumerated from the parsers, and each command line the
    sweep runs is one the real parser accepts (a parse, no run)."""
    from corl_vl.cli import build_parser

    flags = sweep_cli.cli_flags()
    assert not [f.key for f in flags if f.skip], "every flag has a value rule"
    commands = {f.command for f in flags}
    assert {
        "train",
        "eval",
        "grade",
        "theory",
        "data synth",
        "models build-tiny",
        "adapters check",
    } <= commands
    parser = build_parser()
    for flag in flags:
        for value in flag.values:
            argv = [t.replace("{", "").replace("}", "") for t in sweep_cli.argv_for(flag, value)]
            if argv == ["--version"]:
                continue
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{flag.key}: the sweep's command does not parse: {argv}")
            assert callable(args.func), argv


def test_an_adapter_of_another_family_is_refused_before_models_load(tiny_checkpoint):
    """Found by the sweep: agents.0.adapter=causal_lm on a VLM ended in a transformers traceback, gemma3 in a
    template error after the models loaded, qwen3_vl trained a Qwen2.5-VL through another family's code."""
    from corl_vl.train.preflight import check_models_available

    for adapter in ("causal_lm", "gemma3", "qwen3_vl"):
        with pytest.raises(CorlError, match=rf"^agents\.0\.adapter: {adapter} drives model types") as err:
            check_models_available(_build("agents.0.adapter", adapter))
        _one_line_refusal(err.value, "agents.0.adapter")
    folder = str(tiny_checkpoint("tiny-qwen2.5-vl"))
    with pytest.raises(CorlError, match=r"model_type 'qwen2_5_vl'"):
        check_models_available(
            demo_config([*catalog.TINY, f"agents.0.model={folder}", "agents.0.adapter=gemma3"])
        )
    check_models_available(_build("agents.0.adapter", "qwen2_5_vl"))  # the model's own family passes
    check_models_available(
        demo_config([*catalog.TINY, f"agents.0.model={folder}", "agents.0.adapter=qwen2_5_vl"])
    )


def test_wandb_without_a_key_is_refused_before_models_load(tmp_path, monkeypatch):
    """Found by the sweep: train.report_to: [wandb] on a machine without a wandb login ended in wandb's
    UsageError traceback after the models loaded. A key, a netrc entry or an offline mode lets it through."""
    from corl_vl.recipe import train
    from corl_vl.train.preflight import check_reporting

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    out = tmp_path / "run"
    cfg = _build("train.report_to", ["wandb"], (f"train.output_dir={out}",))
    with pytest.raises(CorlError, match=r"^train\.report_to: wandb has no API key here") as err:
        train(cfg, progress=False, prepare=lambda cohort: pytest.fail("the models loaded"))
    _one_line_refusal(err.value, "train.report_to")
    assert not out.exists()  # nothing written
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_reporting(cfg.train.report_to)
    monkeypatch.delenv("WANDB_MODE")
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    check_reporting(cfg.train.report_to)


def test_an_agent_that_trained_nothing_in_the_whole_run_is_warned_about(caplog):
    """Found by the sweep: `train --set grpo.k=2` trained 0 rows (every group's two completions got equal
    rewards) and exited 0 without a word. Now each agent with 0 trained rows over the run gets a warning."""
    from corl_vl.train.loop import TrainingRun
    from corl_vl.train.progress import NothingTrainedCheck

    history = {
        "idle": [{"step": 0, "trained_rows": 0.0}, {"step": 1, "trained_rows": 0.0}],
        "busy": [{"step": 0, "trained_rows": 0.0}, {"step": 1, "trained_rows": 6.0}],
    }
    run = TrainingRun(cohort=None, max_steps=2, completed=2, history=history)
    with caplog.at_level("WARNING", logger="corl_vl"):
        NothingTrainedCheck().close(run)
    warned = [r.getMessage() for r in caplog.records if "trained no row" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("agent idle trained no row in 2 step(s)")
    caplog.clear()
    resumed = TrainingRun(cohort=None, max_steps=2, start_step=2, completed=2, history=history)
    with caplog.at_level("WARNING", logger="corl_vl"):
        NothingTrainedCheck().close(resumed)  # a resume that ran no step has nothing to say
    assert not [r for r in caplog.records if "trained no row" in r.getMessage()]


def test_an_agent_whose_groups_always_tied_is_warned_about_even_when_the_kl_term_trained_its_rows(caplog):
    """Found by the sweep at grpo.beta = 1: with a KL term, rows of tied groups count as trained, so the
    0-rows warning stayed silent while neither agent could learn anything from its rewards."""
    from corl_vl.train.loop import TrainingRun
    from corl_vl.train.progress import NothingTrainedCheck

    tied = {"trained_rows": 8.0, "groups/zero_std_frac": 1.0}
    history = {
        "tied": [{"step": 0, **tied}, {"step": 1, **tied}],
        "learns": [{"step": 0, **tied}, {"step": 1, **tied, "groups/zero_std_frac": 0.5}],
    }
    run = TrainingRun(cohort=None, max_steps=2, completed=2, history=history)
    with caplog.at_level("WARNING", logger="corl_vl"):
        NothingTrainedCheck().close(run)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("agent tied got no reward signal in 2 step(s)")


def test_weights_that_could_not_move_are_not_a_failure():
    """With grpo.beta > 0, rows of tied groups still train (the KL term), but on a step where the policy
    still equals its reference the KL gradient is 0 too: unchanged weights are then arithmetic, not a fault."""
    import sweep_runs

    tied = {"groups/zero_std_frac": 1.0, "kl": 0.0, "trained_rows": 16.0}
    assert sweep_runs.no_gradient([tied, tied])
    assert not sweep_runs.no_gradient([])
    assert not sweep_runs.no_gradient([tied, {**tied, "groups/zero_std_frac": 0.75}])  # a reward signal
    assert not sweep_runs.no_gradient([{**tied, "kl": 1e-6}])  # moved away from the reference

    run = {"rc": 0, "rows": {"a": 16.0, "b": 16.0}, "changed": {"a": True, "b": False}}
    assert sweep_runs.verdict({**run, "tied": {"a": False, "b": True}}, trains=True) == "ok"
    assert sweep_runs.verdict({**run, "tied": {"a": False, "b": False}}, trains=True) == (
        "FAIL: b trained rows, weights unchanged"
    )
    assert sweep_runs.verdict(run, trains=True).startswith("FAIL")  # no record of ties: unexplained
    idle = {"rc": 0, "rows": {"a": 16.0}, "changed": {"a": False}, "tied": {"a": True}}
    assert sweep_runs.verdict({**idle, "warnings": ["agent a got no reward signal"]}, trains=True) == (
        "nothing trained (warned)"
    )
    assert sweep_runs.verdict(idle, trains=True) == "FAIL: nothing trained, no warning"
