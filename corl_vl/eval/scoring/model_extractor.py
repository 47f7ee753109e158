"""Model-based answer extraction, as MathVista's and MathVerse's official pipelines do it, with a local model.

Their published numbers come from GPT reading each response under a few-shot extraction prompt. Here the same
prompt goes through our own generation path (:class:`corl_vl.eval.generate.Generator`: the adapter's chat
template, HF or vLLM engine, greedy decoding) with any local instruct model. Each extraction is cached in
``DIR/extractions/<run>/<benchmark>.jsonl`` keyed by record id, response index and a hash of the response, so a
rerun only extracts what changed. The extraction then replaces the rule-based one in ``official`` scoring.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.generate import Decoding, Generator
from corl_vl.eval.scoring.mathvista import official_shortcut

RULES = "rules"
MODEL_PREFIX = "model:"
#: The benchmarks whose official pipeline extracts with a model (the others are rule-based officially).
MODEL_EXTRACTED = ("mathvista", "mathverse")
MAX_EXTRACTION_TOKENS = 64

# MathVista (evaluation/prompts/ext_ans.py): a task line, then worked examples of question, response and answer.
_MATHVISTA_PROMPT = """Please read the following example. Then extract the answer from the model response and type it at the end of the prompt.

Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end.
Question: Which number is missing?

Model response: The number missing in the sequence is 14.

Extracted answer: 14

Hint: Please answer the question requiring a floating-point number with one decimal place and provide the final value, e.g., 1.2, 1.3, 1.4, at the end.
Question: What is the fraction of females facing the camera?

Model response: The fraction of females facing the camera is 0.6, which means that six out of ten females in the group are facing the camera.

Extracted answer: 0.6

Hint: Please answer the question requiring a floating-point number with two decimal places and provide the final value, e.g., 1.23, 1.34, 1.45, at the end.
Question: How much money does Luca need to buy a sour apple candy and a butterscotch candy? (Unit: $)

Model response: Luca needs $1.45 to buy a sour apple candy and a butterscotch candy.

Extracted answer: 1.45

Hint: Please answer the question requiring a Python list as an answer and provide the final list, e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end.
Question: Between which two years does the line graph saw its maximum peak?

Model response: The line graph saw its maximum peak between 2007 and 2008.

Extracted answer: [2007, 2008]

Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.
Question: What fraction of the shape is blue?
Choices:
(A) 3/11
(B) 8/11
(C) 6/11
(D) 3/5

Model response: The correct answer is (B) 8/11.

Extracted answer: B"""

# MathVerse (evaluation/prompts.py, demo_prompt_extract): numbered examples of response and extracted answer.
_MATHVERSE_PROMPT = """I am providing you a response from a model to a math problem, termed 'Model Response'. You should extract the answer from the response as 'Extracted Answer'. Directly output the extracted answer with no explanation.

1.
Model response: 'Rounded to two decimal places, the perimeter of the sector is approximately:\\n\\n(-2, 1)'
Extracted Answer: (-2, 1)

2.
Model response: 'at those points.\\n\\nTherefore, the correct option that represents the meaning of the intersection points of the graphs is:\\n\\nD. They give the solutions to the equation $f(t)=g(t)$.",'
Extracted Answer: D

3.
Model response: ' at 1 (there's a closed circle at y = 1), the range in interval notation is \\\\((-4, 1]\\\\).\\n\\nFinal values:\\nDomain: \\\\((-3, 3]\\\\)\\nRange: \\\\((-4, 1]\\\\)'
Extracted Answer: Domain: \\\\((-3, 3]\\\\)\\nRange: \\\\((-4, 1]\\\\)

4.
Model response: 'As it stands, I cannot provide the correct option letter because there isn't enough information to solve for 'y'.'
Extracted Answer: null

5.
Model response: 'Given that AB = 17.6 meters, we can now substitute into the equation:\\n\\nd = 17.6 / cos(38\\u00b0)\\n\\nTherefore, to one decimal place, the distance d between Ned and Bart is approximately 22.3 meters.'
Extracted answer: 22.3

6.
Model response:  have all the coefficients for the quadratic function:\\n\\\\( f(x) = ax^2 + bx + c \\\\)\\n\\\\( f(x) = -1x^2 - 2x + 1 \\\\)\\n\\nTherefore, the equation for the graphed function \\\\( f \\\\) is:\\n\\\\( f(x) = -x^2 - 2x + 1 \\\\)"'
Extracted answer: f(x) = -x^2 - 2x + 1

7."""


def parse_extractor(spec: str) -> str | None:
    """``rules`` → None; ``model:PATH_OR_PRESET`` → the model; anything else is an error."""
    if spec == RULES:
        return None
    if spec.startswith(MODEL_PREFIX) and spec[len(MODEL_PREFIX) :].strip():
        return spec[len(MODEL_PREFIX) :].strip()
    raise CorlError(f"--extractor must be 'rules' or 'model:PATH_OR_PRESET', got {spec!r}")


def extraction_prompt(benchmark: str, problem: Problem, response: str) -> str:
    """The benchmark's official extraction prompt for one response."""
    if benchmark == "mathvista":
        query = problem.question
        if problem.choices:
            letters = "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(problem.choices))
            query = f"{query}\nChoices:\n{letters}"
        return f"{_MATHVISTA_PROMPT}\n\n{query}\n\n{response}\n\nExtracted answer: "
    if benchmark == "mathverse":
        return f"{_MATHVERSE_PROMPT}\n\nModel response: '{response}'\nExtracted Answer: "
    raise CorlError(
        f"--extractor model:… applies to {', '.join(MODEL_EXTRACTED)} (whose official pipelines extract with a "
        f"model); {benchmark} is scored by its official rules"
    )


def clean_extraction(text: str) -> str | None:
    """The first line of the model's output without a repeated "Extracted answer:"; ``null`` → None."""
    line = text.strip().split("\n", 1)[0].strip()
    for prefix in ("Extracted answer:", "Extracted Answer:"):
        line = line.removeprefix(prefix).strip()
    return None if not line or line.lower() == "null" else line


def _key(problem_id: str, index: int, response: str) -> str:
    digest = hashlib.sha256(response.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{problem_id}#{index}#{digest}"


class ModelExtractor:
    """A local model that extracts answers with a benchmark's official prompt (loaded once, reused)."""

    def __init__(
        self,
        model: str,
        *,
        engine: str = "hf",
        device: str = "cpu",
        dtype: str = "auto",
        batch_size: int = 8,
        adapter: str | None = None,
    ) -> None:
        self.generator = Generator(
            model,
            adapter=adapter,
            engine=engine,
            device=device,
            batch_size=batch_size,
            dtype=dtype,
            answer_format="none",
        )

    def close(self) -> None:
        """Release the generator's engine (vLLM's weight-sync folder)."""
        self.generator.close()

    def extract(
        self,
        benchmark: str,
        problems: Sequence[Problem],
        responses: Mapping[str, Sequence[str]],
        cache_path: Path,
        *,
        progress: bool = False,
    ) -> dict[str, list[str | None]]:
        """One extraction per response, keyed by record id (records without responses are left out)."""
        prompts: list[Problem] = []
        keys: dict[str, list[str]] = {}
        known: dict[str, str | None] = {}  # answered by the official shortcuts, no model call
        for problem in problems:
            for j, response in enumerate(responses.get(problem.id, ())):
                key = _key(problem.id, j, response)
                keys.setdefault(problem.id, []).append(key)
                shortcut = _shortcut(benchmark, problem, response)
                if shortcut is not None:
                    known[key] = shortcut or None
                else:
                    prompts.append(Problem(key, extraction_prompt(benchmark, problem, response)))
        greedy = Decoding(temperature=0.0, top_p=1.0, max_new_tokens=MAX_EXTRACTION_TOKENS, samples=1)
        out = self.generator.generate(
            prompts, greedy, cache_path, progress=progress, description=f"extracting · {benchmark}"
        )
        return {
            pid: [known[k] if k in known else clean_extraction(out[k][0]) for k in ks]
            for pid, ks in keys.items()
        }


def _shortcut(benchmark: str, problem: Problem, response: str) -> str | None:
    """MathVista's official pipeline answers some responses by rule before asking its model (see
    :func:`corl_vl.eval.scoring.mathvista.official_shortcut`); MathVerse asks the model for every one."""
    if benchmark != "mathvista":
        return None

    meta = problem.meta
    return official_shortcut(
        response, problem.choices, meta.get("question_type", "free_form"), meta.get("answer_type", "text")
    )
