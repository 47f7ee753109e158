"""The benchmarks corl-vl can load: one :class:`~corl_vl.eval.benchmark_rows.BenchmarkSpec` each.

Why a table: the CLI, the loaders and the scorers all key on these names, and ``--benchmark all`` means every
entry here.
"""

from __future__ import annotations

from corl_vl.errors import CorlError
from corl_vl.eval.benchmark_rows import BenchmarkSpec
from corl_vl.eval.benchmarks import mathverse, mathvision, mathvista, text, wemath

_SPECS = [
    BenchmarkSpec("mathvista", "AI4Math/MathVista", None, ("testmini", "test"), mathvista.to_problem),
    BenchmarkSpec(
        "mathverse", "AI4Math/MathVerse", "testmini", ("testmini", "testmini_text_only"), mathverse.to_problem
    ),
    BenchmarkSpec("wemath", "We-Math/We-Math", None, ("testmini",), wemath.to_problem, grouped=True),
    BenchmarkSpec("mathvision", "MathLLMs/MathVision", None, ("testmini", "test"), mathvision.to_problem),
    BenchmarkSpec(
        "math500", "HuggingFaceH4/MATH-500", None, ("test",), text.math500_problem, multimodal=False
    ),
    BenchmarkSpec(
        "amc",
        "AI-MO/aimo-validation-amc",
        None,
        ("train",),
        text.competition_problem,
        samples=8,
        multimodal=False,
    ),
    BenchmarkSpec(
        "aime", "HuggingFaceH4/aime_2024", None, ("train",), text.competition_problem, multimodal=False
    ),
    BenchmarkSpec("gpqa", "Idavidrein/gpqa", "gpqa_diamond", ("train",), text.gpqa_problem, multimodal=False),
    BenchmarkSpec("gsm8k", "openai/gsm8k", "main", ("test",), text.gsm8k_problem, multimodal=False),
]

SPECS: dict[str, BenchmarkSpec] = {s.name: s for s in _SPECS}
BENCHMARKS: tuple[str, ...] = tuple(SPECS)
VISION_BENCHMARKS: tuple[str, ...] = tuple(s.name for s in _SPECS if s.multimodal)
TEXT_BENCHMARKS: tuple[str, ...] = tuple(s.name for s in _SPECS if not s.multimodal)


def get_spec(name: str) -> BenchmarkSpec:
    """The spec called ``name``; an unknown name is one error listing the known ones."""
    try:
        return SPECS[name]
    except KeyError:
        raise CorlError(f"unknown benchmark '{name}'; known: {', '.join(BENCHMARKS)}") from None
