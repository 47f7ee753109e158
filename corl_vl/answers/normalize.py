"""Cheap, sound comparisons of answer strings that decide most pairs before math-verify is needed.

math-verify parses both sides with sympy (milliseconds, sometimes seconds) in a worker process; most answer
pairs met in training and evaluation are plain numbers or identical up to LaTeX spacing, so these functions
settle them in microseconds. Each function answers True, False, or None ("cannot tell, ask math-verify"), and
only answers False when that is certain (two plain numbers that differ, two tuples whose numeric elements
differ). Nothing here evaluates model text: numbers are read by regular expressions into ``Fraction``.

Structural answers (assignments, intervals, matrices, sets, ±) are in :mod:`corl_vl.answers.structures`.

Per-string work (normalising, reading numbers, splitting) is cached: a gold answer meets many predictions.

Hand-written because no maintained library normalises LaTeX answers without sympy (math-verify's own
normaliser feeds straight into ``latex2sympy``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache, wraps
from typing import Any, TypeVar

from corl_vl.answers.numeric_eval import numeric_equal

_CACHE = 1 << 16
_CACHE_MAX_CHARS = 2000  # longer strings (adversarial or prose) are not kept: 2^16 of them could fill memory

_F = TypeVar("_F", bound=Callable[..., Any])


def per_string(fn: _F) -> _F:
    """Cache ``fn(text)`` for texts up to :data:`_CACHE_MAX_CHARS` characters (golds meet many predictions)."""
    cached = lru_cache(maxsize=_CACHE)(fn)

    @wraps(fn)
    def wrapper(text: str) -> Any:
        return cached(text) if len(text) <= _CACHE_MAX_CHARS else fn(text)

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


#: Longest number (in characters) read into a Fraction; longer digit strings are left to math-verify.
_MAX_NUMBER_CHARS = 60

_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# ``\\\\`` (a matrix row break) is matched first and kept, so that ``\\\\ 2`` is not read as ``\\`` + ``\\ ``.
_DROP = re.compile(
    r"(\\\\)|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\displaystyle|\\[bB]igg?[lr]?(?![a-zA-Z])"
    r"|\\[,;: ]|\\quad|\\qquad|~"
)
_FRAC_ALIASES = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![a-zA-Z])|\\textdegree(?![a-zA-Z])")
_SHORT_FRAC = re.compile(r"\\frac\s*(\d)\s*(\d)")
_SHORT_FRAC_DEN = re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)")  # \frac{270}7
_SHORT_FRAC_NUM = re.compile(r"\\frac\s*(\d)\s*\{")  # \frac9{19}
_SHORT_SQRT = re.compile(r"\\sqrt\s*(\d)")
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mbox|mathbf|textit)\{([^{}]*)\}$")
WHITESPACE = re.compile(r"\s+")
# One spelling per relation: "x >= 5", "x \\ge 5", "x ≥ 5" and "x \\geq 5" are the same statement.
_RELATIONS = {
    ">=": "\\geq",
    "\\geq": "\\geq",
    "\\ge": "\\geq",
    "≥": "\\geq",
    "<=": "\\leq",
    "\\leq": "\\leq",
    "\\le": "\\leq",
    "≤": "\\leq",
    "!=": "\\neq",
    "\\neq": "\\neq",
    "\\ne": "\\neq",
    "≠": "\\neq",
    "\\gt": ">",
    "\\lt": "<",
}
_RELATION_SPELLING = re.compile(r">=|<=|!=|≥|≤|≠|\\(?:geq|leq|neq|ge|le|ne|gt|lt)(?:slant)?(?![a-zA-Z])")

# A decimal comma ("2,5", "3,14") has one or two digits after a single comma; three digits mean thousands.
_NUM = r"[-+]?0,\d+(?![\d,])|[-+]?\d+,\d{1,2}(?![\d,])|[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_DECIMAL_COMMA = re.compile(r"[-+]?\d+,\d{1,2}|[-+]?0,\d+")  # a thousands group never follows a lone 0
_UNIT = (
    r"(?:\\(?:text|mbox|mathrm|textrm|operatorname)\s*\{[^{}]*\}"  # \text{ cm}
    r"|(?<=\s)[A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)"  # " cm", " square units" (2+ letters, after a space)
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?"
)
_NUMBER_RE = re.compile(
    rf"^(?P<cur>\\\$|\$)?\s*(?:"
    rf"(?P<sign>[-+])?\\frac\{{(?P<fn>[-+]?\d+)\}}\{{(?P<fd>\d+)\}}"  # \frac{a}{b}
    rf"|(?P<sn>[-+]?\d+)\s*/\s*(?P<sd>\d+)"  # a/b
    rf"|(?P<num>{_NUM})"  # 1,234.5
    rf")\s*(?P<pct>\\?%)?\s*(?:{_UNIT})?\s*(?P<pct2>\\?%)?\s*$"
)


@dataclass(frozen=True)
class Number:
    """A number read from an answer: its exact value, and how it was written."""

    value: Fraction
    decimal: bool  # written with a decimal point (an approximation, compared at 6 places)
    percent: bool  # carried a % sign (then x% may mean x or x/100)

    def candidates(self) -> tuple[Fraction, ...]:
        return (self.value, self.value / 100) if self.percent else (self.value,)


def strip_delimiters(text: str) -> str:
    """Remove surrounding math delimiters, a trailing full stop and outer whitespace."""
    s = text.strip()
    changed = True
    while changed and s:
        changed = False
        for left, right in _DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                changed = True
                break
        if s.endswith("."):
            s = s[:-1].rstrip()
            changed = True
    return s


@per_string
def light(text: str) -> str:
    """Delimiters and LaTeX spacing/sizing commands removed; whitespace kept (unit words need it)."""
    s = strip_delimiters(text)
    s = _DROP.sub(lambda m: m.group(1) or " ", s.replace("\\!", ""))
    s = _FRAC_ALIASES.sub(r"\\frac", s)
    s = _SHORT_FRAC.sub(r"\\frac{\1}{\2}", s)
    s = _SHORT_FRAC_DEN.sub(r"\\frac\1{\2}", s)
    s = _SHORT_FRAC_NUM.sub(r"\\frac{\1}{", s)
    s = _SHORT_SQRT.sub(r"\\sqrt{\1}", s)
    s = _DEGREES.sub("", s)
    s = s.replace("{,}", ",").replace("−", "-")
    s = _RELATION_SPELLING.sub(lambda m: _RELATIONS[m.group(0).replace("slant", "")], s)
    return s.strip()


@per_string
def canonical(text: str) -> str:
    """A canonical spelling: two answers with the same canonical form are the same answer."""
    s = WHITESPACE.sub("", light(text))
    while (m := _TEXT_WRAP.match(s)) is not None:
        s = m.group(1).strip()
    return s.rstrip(".")


@per_string
def parse_number(text: str) -> Number | None:
    """Read a plain number (integer, decimal, fraction, percent, with thousands separators, currency or a
    unit) without evaluating anything; None when the text is not just a number."""
    s = light(text)
    if len(s) > _MAX_NUMBER_CHARS + 40:
        return None
    while (m := _TEXT_WRAP.match(s)) is not None:
        s = m.group(1).strip()
    m = _NUMBER_RE.match(s)
    if m is None:
        return None
    percent = bool(m.group("pct") or m.group("pct2"))
    if m.group("fn") is not None:
        num, den = int(m.group("fn")), int(m.group("fd"))
        if den == 0:
            return None
        value = Fraction(num, den) * (-1 if m.group("sign") == "-" else 1)
        return Number(value, False, percent)
    if m.group("sn") is not None:
        den = int(m.group("sd"))
        return None if den == 0 else Number(Fraction(int(m.group("sn")), den), False, percent)
    raw = m.group("num")
    raw = raw.replace(",", ".") if _DECIMAL_COMMA.fullmatch(raw) else raw.replace(",", "")
    if len(raw) > _MAX_NUMBER_CHARS:
        return None
    return Number(Fraction(raw), "." in raw, percent)


def numbers_equal(gold: Number, pred: Number, precision: int | None = None) -> bool | None:
    """True/False when certain; None when only rounding makes them equal (math-verify decides those).

    With ``precision`` (MathVista float answers) both sides are rounded to that many decimals first.
    """
    pairs = [(g, p) for g in gold.candidates() for p in pred.candidates()]
    if precision is not None:
        return any(round(float(g), precision) == round(float(p), precision) for g, p in pairs)
    if any(g == p for g, p in pairs):
        return True
    if not (gold.decimal or pred.decimal or gold.percent or pred.percent):
        return False
    # math-verify compares floats at 6 decimal places (1/3 == 0.333333); leave those near-misses to it.
    if any(round(g, 6) == round(p, 6) for g, p in pairs):
        return None
    return False


_OPEN = {"(": ")", "[": "]", "\\{": "\\}", "\\langle": "\\rangle"}


@per_string
def split_top_level(text: str) -> tuple[str, tuple[str, ...], str] | None:
    """Split ``(a,b,c)`` / ``[a,b)`` / ``\\{a,b\\}`` / ``a, b`` into (open, items, close) at top-level commas.

    Returns None for anything that is not a sequence of at least two items.
    """
    s = canonical(text)
    opening = closing = ""
    for left in _OPEN:
        if s.startswith(left):
            opening = left
            break
    if opening:
        for right in (")", "]", "\\}", "\\rangle"):
            if s.endswith(right) and len(s) > len(opening) + len(right):
                closing = right
                break
        if not closing:
            return None
        body = s[len(opening) : len(s) - len(closing)]
    else:
        body = s
    items = split_items(body, ",")
    if items is None or len(items) < 2 or any(not item for item in items):
        return None
    return opening, tuple(items), closing


def split_items(body: str, sep: str) -> list[str] | None:
    """``body`` cut at ``sep`` outside brackets; None when the brackets do not balance."""
    items: list[str] = []
    depth = start = i = 0
    while i < len(body):
        if depth == 0 and body.startswith(sep, i):
            items.append(body[start:i])
            i += len(sep)
            start = i
            continue
        if body.startswith("\\\\", i):
            i += 2  # a row break, not a backslash escaping the next character
            continue
        ch = body[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        i += 1
    if depth != 0:
        return None
    items.append(body[start:])
    return items


def atom_equal(gold: str, pred: str, precision: int | None = None) -> bool | None:
    """Fast verdict for two single answers (no tuple structure): canonical strings, then numbers."""
    g_num, p_num = parse_number(gold), parse_number(pred)
    if g_num is not None and p_num is not None:
        return numbers_equal(g_num, p_num, precision)
    if canonical(gold) == canonical(pred):
        return True
    return None


def element_equal(gold: str, pred: str, precision: int | None) -> bool | None:
    verdict = atom_equal(gold, pred, precision)
    return verdict if verdict is not None else numeric_equal(light(gold), light(pred))


def combine(verdicts: list[bool | None]) -> bool | None:
    """All True → True; any False → False; else None."""
    if False in verdicts:
        return False
    return True if all(v is True for v in verdicts) else None
