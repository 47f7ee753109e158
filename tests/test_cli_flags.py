"""Flags that used to be accepted and ignored, or silently replaced by defaults, are refused in one line
(exit 2) before any work is done; output paths that cannot be written are named in one line."""

from __future__ import annotations

import errno
import math

import pytest

from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.io import os_error_line


def _refused(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"corl-vl {argv[0]}: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--phase-portrait", "OUT.png", "--peer-reward", "soft"], "--peer-reward: --phase-portrait draws"),
        (["--phase-portrait", "OUT.png", "--advantage", "dr_grpo"], "--advantage: --phase-portrait draws"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--horizon", "5"], "--horizon does not apply to --cohort"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--tol", "1e-3"], "--tol does not apply to --cohort"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--rtol", "1e-3"], "--rtol does not apply to --cohort"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--atol", "1e-3"], "--atol does not apply to --cohort"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--until", "-5"], "--until must be a positive, finite number"),
        (["--cohort", "0.9,0.2;0.2,0.9", "--until", "nan"], "--until must be a positive, finite number"),
        (["--pa", "0.6", "--pb", "0.5", "--until", "50"], "--until applies to --cohort"),
        (["--pa", "0.6", "--pb", "0.5", "--per-tag"], "--per-tag applies to --cohort"),
        (["--pa", "0.6", "--pb", "0.5", "--horizon", "inf"], "--horizon must be a positive, finite number"),
    ],
)
def test_theory_refuses_options_its_mode_ignores(capsys, tmp_path, extra, needle):
    argv = ["theory", *[str(tmp_path / a) if a == "OUT.png" else a for a in extra]]
    _refused(capsys, argv, needle)
    assert not (tmp_path / "OUT.png").exists()


def test_theory_phase_portrait_beside_an_integration_says_what_it_draws(capsys, tmp_path):
    out = tmp_path / "flow.png"
    argv = ["theory", "--pa", "0.6", "--pb", "0.5", "--peer-reward", "soft", "--phase-portrait", str(out)]
    assert main(argv) == 0
    assert "the phase portrait shows the hard-reward, grpo-advantage flow" in capsys.readouterr().err
    assert out.is_file()


def _eval_responses(tmp_path, *extra: str) -> list[str]:
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "1", "response": "2"}\n')
    return [
        "eval",
        "--benchmark",
        "mathvista",
        "--data",
        str(tmp_path),
        "--responses",
        str(responses),
        "--output-dir",
        str(tmp_path / "out"),
        *extra,
    ]


@pytest.mark.parametrize(
    "extra", [["--samples", "4"], ["--temperature", "0.7"], ["--max-long-side", "512"], ["--engine", "vllm"]]
)
def test_eval_responses_refuses_generation_flags(capsys, tmp_path, extra):
    _refused(capsys, _eval_responses(tmp_path, *extra), f"{extra[0]} applies to generating responses")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
        (["--samples", "0"], "--samples must be at least 1, got 0"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--temperature", "nan"], "--temperature must be a finite number"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    ],
)
def test_eval_refuses_values_it_would_replace(capsys, tmp_path, extra, needle):
    argv = [
        "eval",
        "--model",
        "tiny-qwen2.5",
        "--benchmark",
        "math500",
        "--output-dir",
        str(tmp_path),
        *extra,
    ]
    _refused(capsys, argv, needle)


def test_default_decoding_keeps_an_explicit_zero():
    from corl_vl.errors import CorlError
    from corl_vl.eval.generate import default_decoding

    with pytest.raises(CorlError, match="max_new_tokens=0"):
        default_decoding(False, 1, max_new_tokens=0)
    with pytest.raises(CorlError, match="T=nan"):
        default_decoding(False, 1, temperature=math.nan)


def test_eval_cuda_device_without_a_gpu_is_one_line(capsys, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [
        "eval",
        "--model",
        "tiny-qwen2.5",
        "--benchmark",
        "math500",
        "--output-dir",
        str(tmp_path),
        "--device",
        "cuda",
    ]
    _refused(capsys, argv, "--device cuda: this machine has no usable CUDA GPU")


def test_eval_output_dir_that_is_a_file(capsys, tmp_path):
    file = tmp_path / "results.txt"
    file.write_text("mine")
    argv = _eval_responses(tmp_path)
    argv[argv.index("--output-dir") + 1] = str(file)
    _refused(capsys, argv, "is a file, not a folder")
    assert file.read_text() == "mine"


def _grade(tmp_path, *extra: str) -> list[str]:
    graded = tmp_path / "in.jsonl"
    graded.write_text('{"response": "\\\\boxed{2}", "answer": "2"}\n')
    return ["grade", "--input", str(graded), "--no-progress", *extra]


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_grade_timeout_must_be_finite(capsys, tmp_path, value):
    _refused(capsys, _grade(tmp_path, "--output", str(tmp_path / "g.jsonl"), "--timeout", value), "--timeout")


def test_grade_benchmark_needs_official_scoring(capsys, tmp_path):
    argv = _grade(tmp_path, "--output", str(tmp_path / "g.jsonl"), "--benchmark", "mathvista")
    _refused(capsys, argv, "--benchmark mathvista picks the published rules of --scoring official")


def test_grade_output_below_a_file(capsys, tmp_path):
    (tmp_path / "FILE").write_text("x")
    _refused(
        capsys, _grade(tmp_path, "--output", str(tmp_path / "FILE" / "x.jsonl")), "is a file, not a folder"
    )


def test_grade_output_name_too_long(capsys, tmp_path):
    line = _refused(capsys, _grade(tmp_path, "--output", str(tmp_path / ("n" * 300) / "x.jsonl")))
    assert "255 bytes per name" in line
    assert not list(tmp_path.glob("n*"))


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (errno.ENAMETOOLONG, "too long"),
        (errno.EEXIST, "a file is in the way"),
        (errno.ENOTDIR, "is a file, not a folder"),
    ],
)
def test_errno_hints(code, needle):
    line = os_error_line(OSError(code, "boom", "/some/path"))
    assert line is not None and line.startswith("/some/path: ") and needle in line


def test_greedy_eval_of_a_nan_model_is_one_line_naming_the_model(tmp_path):
    import torch

    from corl_vl.data import to_text_problem
    from corl_vl.data.synth import generate_problems
    from corl_vl.eval.generate import Decoding, Generator

    generator = Generator("tiny-qwen2.5", batch_size=2)
    with torch.no_grad():
        for param in generator.engine.model.parameters():
            param.fill_(math.nan)
    problems = [to_text_problem(p) for p in generate_problems(2, seed=1)]
    greedy = Decoding(temperature=0.0, top_p=1.0, max_new_tokens=3, samples=1)
    with pytest.raises(CorlError) as err:
        generator.generate(
            problems, greedy, tmp_path / "cache.jsonl", progress=False, description="nan · test"
        )
    line = str(err.value)
    assert line.startswith(f"nan · test: model {generator.adapter.model_path}: ") and "NaN/inf" in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--temperature", "0.5"], "--temperature applies to generating answers (--model)"),
        (["--engine", "vllm"], "--engine applies to generating answers"),
        (["--data", "problems.jsonl"], "--data applies to generating answers"),
    ],
)
def test_diagnose_answers_refuse_generation_flags(capsys, tmp_path, extra, needle):
    _refused(capsys, ["diagnose", "--answers", "a.jsonl", "--answers", "b.jsonl", *extra], needle)


def test_diagnose_refuses_zero_new_tokens(capsys):
    argv = ["diagnose", "--model", "a", "--model", "b", "--data", "d.jsonl", "--max-new-tokens", "0"]
    _refused(capsys, argv, "--max-new-tokens must be at least 1, got 0")
