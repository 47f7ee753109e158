"""Multiple-choice options: which letters exist, what each option's value is, and reading a letter.

Benchmarks spell options three ways: bare texts (MathVista ``["145°", "150°"]``, letters A, B, … implied),
labelled texts (We-Math ``"A. 3"``, ``"(b) 4"``), or the letters themselves (MathVision ``["A", …, "E"]``).
Letters are case-sensitive (upper-case) because a lone "a" is usually an English article; they are read
case-insensitively only when the options themselves are labelled with lower-case letters.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

_LABELLED = re.compile(r"^\s*\(?([A-Za-z])[.):]\s*(.*)$", re.DOTALL)
_LONE_LETTER = re.compile(r"^\(?([A-Za-z])\)?[.):]?$")
_LEAD_LETTER = re.compile(r"^\(([A-Za-z])\)\s+\S|^([A-Za-z])[.:)]\s+\S")
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\{([^{}]*)\}")


@dataclass(frozen=True)
class Options:
    """Letters (upper-case), the option values they stand for, and whether lower-case letters count."""

    letters: tuple[str, ...]
    values: tuple[str, ...]
    lower: bool

    def index_of_letter(self, letter: str) -> int | None:
        key = letter.upper() if self.lower else letter
        return self.letters.index(key) if key in self.letters else None


@lru_cache(maxsize=4096)
def _parse(choices: tuple[str, ...]) -> Options:
    letters = tuple(string.ascii_uppercase[: len(choices)])
    labelled = [_LABELLED.match(c) for c in choices]
    if len(choices) <= 26 and all(m is not None and m.group(2).strip() for m in labelled):
        labels = "".join(m.group(1) for m in labelled if m is not None)
        if labels in (string.ascii_uppercase[: len(labels)], string.ascii_lowercase[: len(labels)]):
            values = tuple(m.group(2).strip() for m in labelled if m is not None)
            return Options(letters, values, labels.islower())
    bare = "".join(c.strip() for c in choices)
    lower = len(bare) == len(choices) and bare == string.ascii_lowercase[: len(choices)]
    return Options(letters, tuple(c.strip() for c in choices), lower)


def parse_options(choices: Sequence[str]) -> Options:
    """Options of a question (cached; call freely)."""
    return _parse(tuple(str(c) for c in choices))


def letter_of(answer: str, options: Options) -> str | None:
    """The option letter an answer names ("B", "(B)", "B.", "\\text{(B)}", "(B) 145°", "B. 145°"), upper-cased;
    None when the answer is not a valid letter of these options."""
    s = _WRAPPERS.sub(r"\1", answer.strip().strip("$").strip())
    s = s.replace("\\(", "(").replace("\\)", ")").strip()
    m = _LONE_LETTER.match(s) or _LEAD_LETTER.match(s)
    if m is None:
        return None
    letter = m.group(1) or m.group(2)
    index = options.index_of_letter(letter)
    return None if index is None else options.letters[index]
