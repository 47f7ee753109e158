"""Final-answer extraction from a completion, in an explicit, configurable order.

The extracted string is what votes for a peer's pseudo-label, so a wrong extraction is a wrong vote. The
default order (see docs/grading.md) takes the most explicit marker first: the last ``\\boxed{}`` (balanced
braces), then the last ``<answer>…</answer>``, then "the (final) answer is …", then an option letter. A
completion with none of these has *no* answer (None) instead of letting the last number of a ramble vote; that
fallback exists only when asked for (``last_number_fallback=True``).

Every step is a linear scan or a linear-time regular expression, so 100 kB responses and thousands of nested
braces cost microseconds to milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from corl_vl.answers.options import Options, letter_of, parse_options
from corl_vl.errors import CorlError

DEFAULT_ORDER: tuple[str, ...] = ("boxed", "answer_tag", "answer_phrase", "option_letter")
#: Answers longer than this are truncated prose, not answers.
MAX_ANSWER_CHARS = 2000

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_PHRASE = re.compile(
    r"(?:\b(?:the\s+)?(?:final\s+|correct\s+)?answer\s*(?:is|:)|\*\*answer:?\*\*:?)[ \t]*:?[ \t]*",
    re.IGNORECASE,
)
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{…}``/``\\fbox{…}`` (braces balanced) or ``\\boxed 5``; None if unbalanced."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        depth = 0
        for j in range(i, n):
            ch = text[j]
            if ch == "\\":  # skip escaped characters such as \{ and \}
                continue
            if ch == "{" and (j == 0 or text[j - 1] != "\\"):
                depth += 1
            elif ch == "}" and text[j - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j]
        return None  # truncated: the last box never closes
    m = re.match(r"[^\s$]+", text[i:])  # \boxed 5
    return m.group(0) if m else None


def _answer_tag(text: str) -> str | None:
    last = None
    for m in _ANSWER_TAG.finditer(text):
        last = m.group(1)
    if last is None:
        return None
    inner = _boxed_content(last)
    return inner if inner is not None else last


def _answer_phrase(text: str) -> str | None:
    last = None
    for m in _ANSWER_PHRASE.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() : last.end() + MAX_ANSWER_CHARS]
    boxed = _boxed_content(rest)
    if boxed is not None:
        return boxed
    end = _sentence_end(rest)
    return rest[:end] if end < MAX_ANSWER_CHARS else None  # no end in sight: prose, not an answer


def _sentence_end(rest: str) -> int:
    """End of the first sentence/line, not counting full stops inside $…$ or decimals."""
    in_math = False
    for k, ch in enumerate(rest):
        if ch == "\n":
            return k
        if ch == "$":
            in_math = not in_math
        elif ch == "." and not in_math and (k + 1 == len(rest) or rest[k + 1].isspace()):
            return k
    return len(rest)


def _option_letter(text: str, options: Options | None) -> str | None:
    """A lone letter ("B", "(B)", "B."), a last line opening with "(B)"/"B." or the last "(B)" in the text."""
    if options is None:
        return None
    stripped = text.strip()
    letter = letter_of(stripped, options)
    if letter is not None:
        return letter
    lines = stripped.splitlines()
    if lines:
        m = re.match(r"^\s*\(?([A-Za-z])[.):]\s", lines[-1] + " ")
        if m and letter_of(m.group(1), options) is not None:
            return m.group(1)
    for m in reversed(list(re.finditer(r"\(([A-Za-z])\)", text))):
        if letter_of(m.group(1), options) is not None:
            return m.group(1)
    return None


def _last_number(text: str) -> str | None:
    last = None
    for m in _LAST_NUMBER.finditer(text):
        last = m.group(0)
    return last.rstrip(",") if last else None


def _clean(answer: str | None, options: Options | None) -> str | None:
    if answer is None:
        return None
    s = answer.strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    s = s.rstrip(".").strip()
    if options is not None:  # "B because …" / "(B) 145°" → the letter
        m = re.match(r"^\(?([A-Za-z])\)?(?:[.):,]|\s|$)", s)
        if m and letter_of(m.group(1), options) is not None:
            return m.group(1)
    if not s or len(s) > MAX_ANSWER_CHARS:
        return None
    return s


def extract_answer(
    text: str,
    choices: Sequence[str] | None = None,
    *,
    order: Sequence[str] | None = None,
    last_number_fallback: bool = False,
) -> str | None:
    """The final answer of one completion, or None when it gives none.

    Args:
        text: the completion.
        choices: option texts of a multiple-choice question (enables option letters; see
            :func:`corl_vl.answers.options.parse_options` for when lower-case letters count).
        order: extraction steps to try, first hit wins; names from ``boxed``, ``answer_tag``,
            ``answer_phrase``, ``option_letter``, ``last_number``. Default :data:`DEFAULT_ORDER`.
        last_number_fallback: append ``last_number`` to the order (the public release's behaviour).
    """
    options = parse_options(choices) if choices else None
    steps = list(DEFAULT_ORDER if order is None else order)
    if last_number_fallback and "last_number" not in steps:
        steps.append("last_number")
    for name in steps:
        step = _STEPS.get(name)
        if step is None:
            raise CorlError(f"unknown answer extraction step {name!r}; choose from {sorted(_STEPS)}")
        found = _clean(step(text, options), options)
        if found is not None:
            return found
    return None


_STEPS: dict[str, Callable[[str, Options | None], str | None]] = {
    "boxed": lambda text, _o: _boxed_content(text),
    "answer_tag": lambda text, _o: _answer_tag(text),
    "answer_phrase": lambda text, _o: _answer_phrase(text),
    "option_letter": _option_letter,
    "last_number": lambda text, _o: _last_number(text),
}
