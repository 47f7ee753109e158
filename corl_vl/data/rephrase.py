"""Answer-preserving rephrased views ("Different family+"), written by any supported LLM.

Why: one Co-RL agent may train on a rewrite of each question, which decouples the two agents' errors further
(paper: DeepSeek-V3 rewrites of MATH). The public release paired rewrites by position and trusted the writer;
here every output row keeps its original's id, answer, options and images, the file is written atomically in
the original's order (so :func:`corl_vl.data.paired.load_paired_view` accepts it), and a cheap guard replaces
rewrites that are obviously broken — empty, cut at the token limit, far too long, or missing a number that the
original states — by the original question, counting each case. The guard is a filter for gross failures, not
a proof that a rewrite preserves the answer: a rewrite can keep every number and still change the problem.

Generation goes through the same adapters and rollout engines as training and evaluation: this module holds the
guard, the loop over a rollout engine and the writer; :func:`corl_vl.eval.rephrase.rephrase` opens the model
(:class:`corl_vl.eval.generate.Generator`, with the adapter's answer instruction switched off: the rewrite prompt
asks for a problem, not a solution). Opening a model needs ``corl_vl.eval``, which imports this package, hence
the split.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir, write_jsonl_atomic

__all__ = [
    "REWRITE_PROMPT",
    "RephraseResult",
    "check_rewrite",
    "check_settings",
    "numbers_in",
    "rephrase_with",
    "write_view",
]

REWRITE_PROMPT = (
    "Rewrite the following math problem in different words, for example as a short concrete scenario. "
    "Keep every number, every condition and the answer unchanged, and do not solve it. "
    "Output only the rewritten problem.\n\nProblem:\n{question}"
)

#: A rewrite longer than this many times the original's characters (plus slack) is rejected: the paper's
#: rewrites are about twice as long; far longer usually means the model started solving or rambling.
MAX_LENGTH_RATIO = 4.0
LENGTH_SLACK_CHARS = 200

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers_in(text: str) -> set[str]:
    """The numbers written in ``text`` as digit strings (thousands separators dropped, ``2.50`` → ``2.5``)."""
    plain = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    out = set()
    for match in _NUMBER.findall(plain):
        if "." in match:
            match = match.rstrip("0").rstrip(".")
        out.add(match.lstrip("0") or "0")
    return out


def check_rewrite(original: str, rewrite: str, *, clipped: bool = False) -> str:
    """``"ok"`` or why the rewrite is rejected: ``empty``, ``too_long`` (or cut at the token limit),
    ``missing_number`` (a number of the original does not occur in the rewrite)."""
    text = rewrite.strip()
    if not text:
        return "empty"
    if clipped or len(text) > MAX_LENGTH_RATIO * len(original) + LENGTH_SLACK_CHARS:
        return "too_long"
    if not numbers_in(original) <= numbers_in(text):
        return "missing_number"
    return "ok"


@dataclass
class RephraseResult:
    """The rephrased problems (original order) and how many rewrites the guard replaced, by reason."""

    problems: list[Problem]
    replaced: Counter = field(default_factory=Counter)

    @property
    def n_replaced(self) -> int:
        return sum(self.replaced.values())


def _request(problem: Problem) -> Problem:
    """The rewrite prompt as a text-only problem (same id, so the engine's order check still applies)."""
    return Problem(id=problem.id, question=REWRITE_PROMPT.format(question=problem.question.strip()))


def check_settings(max_new_tokens: int, temperature: float, batch_size: int) -> None:
    """The decoding settings a rewrite accepts (one line naming them otherwise)."""
    if max_new_tokens < 1 or temperature < 0 or batch_size < 1:
        raise CorlError(
            f"rephrase: bad settings max_new_tokens={max_new_tokens}, temperature={temperature}, "
            f"batch_size={batch_size}"
        )


def rephrase_with(
    engine: Any,
    problems: Sequence[Problem],
    *,
    max_new_tokens: int = 512,
    temperature: float = 0.0,
    seed: int = 0,
    batch_size: int = 8,
) -> RephraseResult:
    """Rewrite each problem's question with a rollout ``engine`` (anything with the engines' ``generate``);
    everything else is kept. A rejected rewrite (see :func:`check_rewrite`) is replaced by the original question
    and counted in ``replaced``; ``meta["rephrase"]`` records ``ok`` or the reason on every row.

    :func:`corl_vl.eval.rephrase.rephrase` opens the engine from a model name and calls this.
    """
    check_settings(max_new_tokens, temperature, batch_size)
    result = RephraseResult(problems=[])
    for start in range(0, len(problems), batch_size):
        chunk = list(problems[start : start + batch_size])
        rollouts = engine.generate(
            [_request(p) for p in chunk],
            k=1,
            temperature=temperature,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            seed=seed + start,
        )
        for problem, rollout in zip(chunk, rollouts, strict=True):
            if rollout.problem_id != problem.id:
                raise RuntimeError(f"rollout for {rollout.problem_id} returned in place of {problem.id}")
            completion = rollout.completions[0]
            verdict = check_rewrite(problem.question, completion.text, clipped=completion.clipped)
            question = completion.text.strip() if verdict == "ok" else problem.question
            if verdict != "ok":
                result.replaced[verdict] += 1
            result.problems.append(
                Problem(
                    id=problem.id,
                    question=question,
                    images=list(problem.images),
                    choices=problem.choices,
                    answer=problem.answer,
                    meta={"rephrase": verdict},
                )
            )
    return result


def _image_paths(images: Sequence[Any]) -> list[str] | None:
    """JSON-writable image references: absolute paths. Embedded (PIL) images cannot go into JSONL, so a row
    with any of them lists none, and ``load_paired_view`` takes the whole list from the original row."""
    if not images or not all(isinstance(im, str | Path) for im in images):
        return None
    return [str(Path(im).resolve()) for im in images]


def write_view(problems: Sequence[Problem], out: str | Path, *, overwrite: bool = False) -> Path:
    """Write problems as a paired view that ``load_problems`` / ``load_paired_view`` read, atomically.

    ``*.jsonl``: one row per problem (``id, question, answer, choices, images, rephrase``); image files are
    referenced by absolute path, embedded images are left out (taken from the original by
    ``load_paired_view``). Any other name: a ``datasets`` ``save_to_disk`` folder with images embedded, which
    is self-contained. Either way a temporary sibling is written and renamed into place.
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise CorlError(f"{out} already exists (use --overwrite to replace it)")
    if out.suffix != ".jsonl":
        return _write_disk(problems, out)
    rows = (
        {
            "id": p.id,
            "question": p.question,
            "answer": p.answer,
            "choices": p.choices,
            "images": _image_paths(p.images),
            "rephrase": p.meta.get("rephrase"),
        }
        for p in problems
    )
    with atomic_dir(out) as new:  # atomic_dir, not atomic_file: --overwrite may replace a folder
        write_jsonl_atomic(new, rows)
    return out


def _write_disk(problems: Sequence[Problem], out: Path) -> Path:
    # lazy: PIL, datasets
    from datasets import Dataset, Features, Image, Value, disable_progress_bars
    from datasets import Sequence as Seq

    from corl_vl.data.images import open_image

    disable_progress_bars()
    features = Features(
        {
            "id": Value("string"),
            "question": Value("string"),
            "answer": Value("string"),
            "choices": Seq(Value("string")),
            "images": Seq(Image()),
            "rephrase": Value("string"),
        }
    )
    columns = {
        "id": [p.id for p in problems],
        "question": [p.question for p in problems],
        "answer": [p.answer for p in problems],
        "choices": [p.choices or [] for p in problems],
        "images": [[open_image(im, where=f"problem {p.id}") for im in p.images] for p in problems],
        "rephrase": [str(p.meta.get("rephrase", "")) for p in problems],
    }
    table = Dataset.from_dict(columns, features=features)
    with atomic_dir(out) as tmp:
        table.save_to_disk(str(tmp), num_shards=1)
    return out
