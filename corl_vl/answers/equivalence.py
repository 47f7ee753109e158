"""Are two answers the same answer? Fast sound paths first, then math-verify under a hard time limit.

Order of decisions for ``equivalent(gold, pred)`` (gold first: math-verify is asymmetric):

1. empty / missing → False;
2. multiple choice (``choices`` given and gold names an option): same letter, or the prediction equals the
   gold option's value (°, %, units stripped); a different letter or another option's value → False;
3. fast paths (:mod:`corl_vl.answers.normalize`): canonical LaTeX strings, plain numbers (fractions, percent,
   units, thousands separators), ``x = 5`` assignments, linear equations, intervals and their unions, matrices,
   numbers in a base, ``a \\pm b``, one level of tuples/sets/lists, and simple expressions (trigonometric
   functions, ``e``, ``i``) evaluated numerically — each following math-verify's own rules, and answering False only when certain;
4. inputs that could hang sympy (over 1,000 characters, braces nested over 40 deep, power towers, huge
   exponents or factorials) → False without asking math-verify;
5. math-verify ``verify(parse(gold), parse(pred))`` in a worker process, with ``timeout`` seconds (default
   :data:`DEFAULT_TIMEOUT_S`); a timeout → False.

Verdicts are cached (LRU, 2^16 pairs), except timeouts, which may succeed on a less loaded machine.
Model text is never passed to ``eval``/``exec``/``sympify`` here; only math-verify's parser sees it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from corl_vl.answers import mathverify_pool
from corl_vl.answers.normalize import canonical, light, parse_number, split_items
from corl_vl.answers.options import Options, letter_of, parse_options
from corl_vl.answers.structures import fast_equal
from corl_vl.answers.units import same_unit, strip_label, value_of

DEFAULT_TIMEOUT_S = 5.0
#: Longest answer handed to math-verify; longer ones are only compared as strings.
MAX_VERIFY_CHARS = 1000
MAX_BRACE_DEPTH = 40

# Numeric power towers (9^9^9, 10^{10^{10}}), exponents of 7+ digits, factorials of 5+ digits: sympy may try
# to build the integer (10^(10^10) needs 4 GB). Symbolic powers such as x^2 + y^2 are not affected.
_RISKY = re.compile(r"\d\s*\^\s*\{?\s*\d+\s*\}?\s*\^\s*\{?\s*\d|\^\s*\{?\s*[-+]?\d{7,}|\d{5,}\s*!")


class _Undecided(Exception):
    """math-verify did not answer in time; keeps the pair out of the cache."""


def _max_depth(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch == "{" or ch == "(" or ch == "[":
            depth += 1
            best = max(best, depth)
        elif ch == "}" or ch == ")" or ch == "]":
            depth -= 1
    return best


def _safe_for_sympy(s: str) -> bool:
    return len(s) <= MAX_VERIFY_CHARS and _max_depth(s) <= MAX_BRACE_DEPTH and _RISKY.search(s) is None


# Plain words ("red", "top left"): every token 3+ letters. Compared as words, case-insensitively: math-verify
# would read them as products of symbols ("left top" = "top left") and costs a worker round-trip per new pair.
_PLAIN_WORDS = re.compile(r"[A-Za-z]{3,}(?: [A-Za-z]{3,})*")


def _free_equivalent(gold: str, pred: str, precision: int | None, timeout: float) -> bool:
    (g_value, g_unit), (p_value, p_unit) = value_of(gold), value_of(pred)
    if g_unit is not None and p_unit is not None and same_unit(g_unit, p_unit) is False:
        return False  # 12h is not 12a, 5 cm is not 5 m
    if g_unit is not None or p_unit is not None or strip_label(gold) != gold or strip_label(pred) != pred:
        gold, pred = g_value, p_value  # "Area $=5 \mathrm{~cm}^{2}$" states 5
    rhs = _stated_right_side(gold) if "=" not in pred else None
    if rhs is not None:  # "AB=4,CD=5" states 4, 5; "\frac{NO}{BO}=\frac{1}{\sqrt{6}}" states its right side
        gold = rhs
    verdict = fast_equal(gold, pred, precision)
    if verdict is not None:
        return verdict
    g, p = " ".join(gold.split()), " ".join(pred.split())
    if _PLAIN_WORDS.fullmatch(g) and _PLAIN_WORDS.fullmatch(p):
        return g.lower() == p.lower()
    if not (_safe_for_sympy(gold) and _safe_for_sympy(pred)):
        return False
    verdict = mathverify_pool.check(gold, pred, timeout)
    if verdict is None:
        raise _Undecided
    return verdict


_ONE_LETTER = re.compile(r"^\s*[A-Za-z]\s*$")


def _stated_right_side(gold: str) -> str | None:
    """The values a gold written as named equations states: the right side of each top-level ``name = value``
    (comma-separated), when no left side is a lone variable (``x = 2x - 5`` is an equation to solve)."""
    items = split_items(light(gold), ",")
    if not items or "=" not in gold:
        return None
    sides = [item.split("=") for item in items]
    if any(len(parts) != 2 or not parts[1].strip() or _ONE_LETTER.match(parts[0]) for parts in sides):
        return None
    if not all(_NAME.match(parts[0]) for parts in sides):
        return None  # "7 = 11a + c", "a + 3z = 0": equations, not names
    return ", ".join(parts[1].strip() for parts in sides)


# A name on the left of "=": letters, subscripts, braces, \frac, brackets and ":" ("S_{MBCN}:S", "(p,q)"),
# with at least two letters and no operator or digit.
_NAME = re.compile(r"^(?=(?:[^A-Za-z]*[A-Za-z]){2})[A-Za-z\\{}_(),:;\s]+$")


def _option_value_equal(value: str, pred: str, precision: int | None) -> bool:
    """Option values are often words ("Yes", "equal to") or quantities ("145°", "6cm")."""
    if canonical(value).lower() == canonical(pred).lower():
        return True
    (v_value, v_unit), (p_value, p_unit) = value_of(value), value_of(pred)
    if v_unit is not None and p_unit is not None and same_unit(v_unit, p_unit) is False:
        return False  # "12h" is not the option "12a"
    v_num, p_num = parse_number(v_value), parse_number(p_value)
    return v_num is not None and p_num is not None and v_num.value == p_num.value


def _gold_index(gold: str, options: Options) -> int | None:
    key = canonical(gold).lower()
    for i, value in enumerate(options.values):
        if canonical(value).lower() == key:
            return i
    letter = letter_of(gold, options)
    return None if letter is None else options.letters.index(letter)


def _mc_equivalent(gold: str, pred: str, options: Options, precision: int | None, timeout: float) -> bool:
    gi = _gold_index(gold, options)
    if gi is None:  # gold is not one of the options: compare freely
        return _free_equivalent(gold, pred, precision, timeout)
    letter = letter_of(pred, options)
    if letter is not None:
        pi = options.letters.index(letter)
        # A letter-shaped value ("A" among options ["A", …]) is both; either reading must agree.
        return pi == gi
    if _option_value_equal(options.values[gi], pred, precision):
        return True
    if any(_option_value_equal(v, pred, precision) for i, v in enumerate(options.values) if i != gi):
        return False
    return _free_equivalent(options.values[gi], pred, precision, timeout)


@lru_cache(maxsize=1 << 16)
def _cached(
    gold: str, pred: str, choices: tuple[str, ...] | None, precision: int | None, timeout: float
) -> bool:
    if choices:
        return _mc_equivalent(gold, pred, parse_options(choices), precision, timeout)
    return _free_equivalent(gold, pred, precision, timeout)


def _said_once(text: str) -> str:
    """One value written on several lines ("-4.9\\n-4.9") is that value, as a repeated box is."""
    s = text.strip()
    if "\n" in s:
        lines = {line.strip() for line in s.splitlines() if line.strip()}
        if len(lines) == 1:
            return lines.pop()
    return s


def equivalent(
    gold: str | None,
    pred: str | None,
    choices: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    precision: int | None = None,
) -> bool:
    """Whether ``pred`` is the same answer as ``gold`` (gold first; see the module docstring for the rules).

    Args:
        gold: the reference (a dataset answer, or a pseudo-label).
        pred: an extracted answer; None (unparseable) is never equivalent.
        choices: option texts for multiple choice (letters A, B, … implied unless labelled).
        timeout: seconds math-verify may spend on this pair (default :data:`DEFAULT_TIMEOUT_S`); works
            from any thread.
        precision: compare numbers after rounding both to this many decimals (MathVista float answers).
    """
    if gold is None or pred is None:
        return False
    gold, pred = _said_once(str(gold)), _said_once(str(pred))
    if not gold or not pred:
        return False
    key_choices = tuple(str(c) for c in choices) if choices else None
    try:
        return _cached(gold, pred, key_choices, precision, DEFAULT_TIMEOUT_S if timeout is None else timeout)
    except _Undecided:
        return False


def clear_cache() -> None:
    """Forget cached verdicts (benchmarks use this to time cold comparisons)."""
    _cached.cache_clear()
