"""``corl-vl data rephrase`` from Python: a rephrased view of a problem set written by any supported model.

Why here and not in :mod:`corl_vl.data.rephrase` (the guard, the loop and the writer): opening a model goes
through :class:`corl_vl.eval.generate.Generator`, and ``corl_vl.eval`` imports ``corl_vl.data``.
"""

from __future__ import annotations

from collections.abc import Sequence

from corl_vl.data.problem import Problem
from corl_vl.data.rephrase import RephraseResult, check_settings, rephrase_with
from corl_vl.eval.generate import Generator

__all__ = ["rephrase"]


def rephrase(
    problems: Sequence[Problem],
    model: str,
    *,
    adapter: str | None = None,
    engine: str = "hf",
    max_new_tokens: int = 512,
    temperature: float = 0.0,
    seed: int = 0,
    batch_size: int = 8,
    device: str = "cpu",
) -> RephraseResult:
    """Rewrite each problem's question with ``model`` (a preset, folder or hub id; greedy by default), everything
    else kept; see :func:`corl_vl.data.rephrase.rephrase_with`."""
    check_settings(max_new_tokens, temperature, batch_size)  # before the model loads
    with Generator(
        model, adapter=adapter, engine=engine, device=device, batch_size=batch_size, answer_format="none"
    ) as gen:
        return rephrase_with(
            gen.engine,
            problems,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            batch_size=batch_size,
        )
