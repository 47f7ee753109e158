"""Fast verdicts for structured answers — relations, equations, intervals, matrices, sets, ± — and
:func:`fast_equal`, the one entry point that combines them with the string/number paths of
:mod:`corl_vl.answers.normalize` and the numeric evaluator.

Like those, every function answers True, False or None ("cannot tell, ask math-verify") and says False only when
certain. Structural paths follow math-verify's own rules (checked against it case by case in
tests/test_equivalence.py):

- ``x = 5`` / ``x \\in [1, 2]`` (one letter on the left): against a non-relation, the right-hand side is
  compared (math-verify unwraps assignments); against the same letter, the right-hand sides are compared —
  unless the letter also occurs on the right (``x = 2x - 5``), which math-verify solves;
- intervals and unions of intervals with constant endpoints, compared as sets: each side must be written as
  its connected components (proper intervals, disjoint, touching only at a point both exclude); then the sets
  are equal exactly when the sorted components are (brackets at ±∞ do not matter, as in sympy);
- linear equations with integer coefficients (``5x - 7y + 11z + 4 = 0``): the same hyperplane exactly when
  the coefficients of L − R are proportional; proportional but not equal is left to math-verify (it solves);
- ``pmatrix``/``bmatrix`` of the same shape, element by element;
- ``52_8``-style numbers in the same base (math-verify compares the digits as a number);
- bare lists and ``\\{…\\}`` sets: equal by an order-free matching, different when some element is certainly
  absent from the other side (math-verify compares them as sets);
- ``a \\pm b`` (one top-level ± before a single term) is the set {a+b, a−b}, against another ±, a bare list or
  one value; inside a bare list or set it contributes both values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise

from corl_vl.answers import numeric_eval
from corl_vl.answers.normalize import (
    WHITESPACE,
    atom_equal,
    canonical,
    combine,
    element_equal,
    light,
    parse_number,
    per_string,
    split_items,
    split_top_level,
)
from corl_vl.answers.numeric_eval import constant_value, numeric_equal

# ---- x = 5, x \in [1, 2] ----------------------------------------------------------------------------------

_RELATION = re.compile(
    r"[=<>≤≥≠]|\\(?:le|ge|leq|geq|ne|neq|lt|gt|in|notin|ni|approx|equiv|sim|simeq|cong|propto|to|mapsto"
    r"|implies|iff|Rightarrow|rightarrow|Leftrightarrow|leftrightarrow|subset|subseteq|supset|supseteq"
    r"|leqslant|geqslant|perp|parallel)(?![a-zA-Z])"
)
_ASSIGNMENT = re.compile(r"^([a-zA-Z])\s*(=|\\in(?![a-zA-Z]))\s*(\S.*)$", re.DOTALL)
_LETTERS = re.compile(r"\\[a-zA-Z]+")


@per_string
def _assignment(text: str) -> tuple[str, str, str] | None:
    """(letter, "=" or "\\in", right-hand side) for ``x = 5`` / ``x \\in [1,2]``; None for anything else.

    Read from the lightly normalised text, so ``\\text{x=5}`` (a string for math-verify) is not an equation."""
    m = _ASSIGNMENT.match(light(text))
    if m is None or m.group(1) in "eEiI":  # e and i are constants for math-verify
        return None
    rhs = m.group(3).strip()
    items = split_items(rhs, ",")
    if _RELATION.search(rhs) or items is None or len(items) > 1:
        return None  # chains (x = y = 5), systems (x = 1, y = 2), unbalanced brackets
    return m.group(1), m.group(2), rhs


def _mentions(expr: str, letter: str) -> bool:
    return letter.lower() in _LETTERS.sub(" ", expr).lower()


def _relation_equal(gold: str, pred: str, precision: int | None) -> bool | None:
    g, p = _assignment(gold), _assignment(pred)
    if g is not None and p is not None:
        if g[:2] != p[:2]:
            return None  # x = 5 vs y = 5, x = 5 vs x \in …: left to math-verify
        if g[1] == "=" and (_mentions(g[2], g[0]) or _mentions(p[2], g[0])):
            return None  # x = 2x - 5: math-verify solves the equations
        return fast_equal(g[2], p[2], precision)
    if g is not None:  # gold x = 5, pred a plain answer: math-verify compares 5 with it
        return None if _RELATION.search(light(pred)) else fast_equal(g[2], pred, precision)
    assert p is not None
    return None if _RELATION.search(light(gold)) else fast_equal(gold, p[2], precision)


# ---- linear equations: 5x - 7y + 11z + 4 = 0 ------------------------------------------------------------

_LINEAR_TERM = re.compile(r"([+-]?)(\d{1,12})?([a-df-hj-z])?")  # integer coefficients, lower-case letters


def _linear(expr: str) -> dict[str, Fraction] | None:
    """Coefficients of an integer linear expression ("" is the constant); None for anything else."""
    s = WHITESPACE.sub("", expr)
    coeffs: dict[str, Fraction] = {}
    pos = 0
    while pos < len(s):
        m = _LINEAR_TERM.match(s, pos)
        sign, num, var = m.groups() if m else (None, None, None)
        if m is None or not (num or var) or (pos > 0 and not sign):
            return None  # 2xy, x5, x^2, \\frac…: not this grammar
        value = Fraction(int(num) if num else 1) * (-1 if sign == "-" else 1)
        coeffs[var or ""] = coeffs.get(var or "", Fraction(0)) + value
        pos = m.end()
    return coeffs or None


@per_string
def _linear_equation(text: str) -> dict[str, Fraction] | None:
    """``L = R`` with both sides integer-linear: the coefficients of L − R (zeros dropped); None otherwise."""
    s = light(text)
    if s.count("=") != 1 or _RELATION.search(s.replace("=", " ")):
        return None
    left, right = (_linear(side) for side in s.split("="))
    if left is None or right is None:
        return None
    diff = dict(left)
    for key, value in right.items():
        diff[key] = diff.get(key, Fraction(0)) - value
    diff = {k: v for k, v in diff.items() if v != 0}
    return diff if any(k for k in diff) else None  # 0 = 0, 3 = 4: no variable left


def _linear_equations_equal(gold: dict[str, Fraction], pred: dict[str, Fraction]) -> bool | None:
    """math-verify first compares L − R of both (equal → True), then solves both (same hyperplane → True).
    Two hyperplanes are the same exactly when their coefficient vectors are proportional."""
    if gold == pred:
        return True
    if gold.keys() != pred.keys():
        return False
    key = next(iter(gold))
    ratio = pred[key] / gold[key]
    return None if all(pred[k] == ratio * gold[k] for k in gold) else False


# ---- intervals and unions of intervals -------------------------------------------------------------------

_CUP = re.compile(r"\\cup(?![a-zA-Z])")
_INFINITY = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1, "∞": 1, "+∞": 1, "-∞": -1}


@dataclass(frozen=True)
class _Interval:
    lo: str
    hi: str
    lo_value: float
    hi_value: float
    lo_closed: bool
    hi_closed: bool


def _endpoint(item: str) -> float | None:
    if item in _INFINITY:
        return float("inf") * _INFINITY[item]
    num = parse_number(item)
    if num is not None and not num.percent:
        return float(num.value)
    return constant_value(light(item))


def _apart(a: float, b: float) -> bool:
    """b is clearly greater than a (relative margin 1e-9; ±∞ count as far from any finite number)."""
    finite = [abs(v) for v in (a, b) if abs(v) != float("inf")]
    return b - a > 1e-9 * max([1.0, *finite])


@per_string
def _components(text: str) -> tuple[_Interval, ...] | None:
    """The intervals of ``(a, b]`` / ``A \\cup B \\cup …`` sorted, when the text is a union of proper intervals
    with constant endpoints written as its connected components; ``()`` for a single interval that is empty or
    one point (``(4, 4]``, ``[5, 3]``); None otherwise."""
    s = canonical(text)
    if not s or s[0] not in "([" or s[-1] not in ")]":
        return None
    pieces: list[_Interval] = []
    for piece in _CUP.split(s):
        if not piece or piece[0] not in "([" or piece[-1] not in ")]":
            return None
        items = split_items(piece[1:-1], ",")
        if items is None or len(items) != 2:
            return None
        lo, hi = (_endpoint(x) for x in items)
        if lo is None or hi is None or lo == float("inf") or hi == float("-inf"):
            return None
        if not _apart(lo, hi):  # empty or a single point: countable, so never equal to a proper interval
            return () if "\\cup" not in s and abs(lo) != float("inf") and abs(hi) != float("inf") else None
        pieces.append(_Interval(items[0], items[1], lo, hi, piece[0] == "[", piece[-1] == "]"))
    pieces.sort(key=lambda iv: iv.lo_value)
    for a, b in pairwise(pieces):
        if _apart(a.hi_value, b.lo_value):
            continue  # separated
        if a.hi_closed or b.lo_closed or element_equal(a.hi, b.lo, None) is not True:
            return None  # overlapping or touching: not written as components
    return tuple(pieces)


def _endpoint_equal(g: str, gv: float, p: str, pv: float, precision: int | None) -> bool | None:
    if abs(gv) == float("inf") or abs(pv) == float("inf"):
        return gv == pv
    return element_equal(g, p, precision)


def _intervals_equal(
    gold: tuple[_Interval, ...], pred: tuple[_Interval, ...], precision: int | None
) -> bool | None:
    if not gold or not pred:  # an empty set or a point against proper intervals
        return False if gold or pred else None
    if len(gold) != len(pred):
        return False  # connected components are unique
    verdicts: list[bool | None] = []
    for g, p in zip(gold, pred):
        lo = _endpoint_equal(g.lo, g.lo_value, p.lo, p.lo_value, precision)
        hi = _endpoint_equal(g.hi, g.hi_value, p.hi, p.hi_value, precision)
        # a bracket matters only at a finite endpoint (sympy makes ±∞ open)
        if lo is True and abs(g.lo_value) != float("inf") and g.lo_closed != p.lo_closed:
            lo = False
        if hi is True and abs(g.hi_value) != float("inf") and g.hi_closed != p.hi_closed:
            hi = False
        verdicts += [lo, hi]
    return combine(verdicts)


# ---- matrices, numbers in a base -------------------------------------------------------------------------

_MATRIX = re.compile(r"^\\begin\{([pb])matrix\}(.*)\\end\{\1matrix\}$", re.DOTALL)
_BASED = re.compile(r"^(\d{1,60})_\{?(\d{1,2})\}?$")


@per_string
def _matrix(text: str) -> tuple[tuple[str, ...], ...] | None:
    m = _MATRIX.match(light(text))
    if m is None:
        return None
    rows = split_items(m.group(2).strip(), "\\\\")
    if rows is None:
        return None
    if len(rows) > 1 and not rows[-1].strip():
        rows.pop()  # a trailing \\ before \end
    cells = [split_items(row, "&") for row in rows]
    if any(row is None or any(not c.strip() for c in row) for row in cells):
        return None
    return tuple(tuple(c.strip() for c in row) for row in cells if row is not None)


def _matrix_equal(
    gold: tuple[tuple[str, ...], ...], pred: tuple[tuple[str, ...], ...], precision: int | None
) -> bool | None:
    if [len(r) for r in gold] != [len(r) for r in pred]:
        return None
    return combine([element_equal(g, p, precision) for gr, pr in zip(gold, pred) for g, p in zip(gr, pr)])


# ---- a ± b ------------------------------------------------------------------------------------------------

_PM = re.compile(r"\\pm(?![a-zA-Z])")


@per_string
def _pm_items(text: str) -> tuple[str, ...] | None:
    """``a \\pm b`` → ``("a+b", "a-b")`` (math-verify reads ± as the set of both); None without ±; ``()`` when
    the ± is not one top-level sign before a single term (``\\frac{3 \\pm \\sqrt5}{2}``, ``1 \\pm 2 + x``)."""
    s = light(text)
    if "\\pm" not in s and "\\mp" not in s:
        return None
    parts = _PM.split(s)
    if len(parts) != 2 or "\\mp" in s:
        return ()
    a, b = parts[0].strip(), parts[1].strip()
    for part, sep in ((a, ","), (b, ","), (b, "+"), (b, "-")):
        pieces = split_items(part, sep)
        if pieces is None or len(pieces) != 1:
            return ()
    return (f"{a}+{b}", f"{a}-{b}") if b else ()


def _expand_pm(items: tuple[str, ...]) -> tuple[str, ...] | None:
    out: list[str] = []
    for item in items:
        pm = _pm_items(item)
        if pm == ():
            return None
        out.extend(pm or (item,))
    return tuple(out)


def _pm_equal(gold: str, pred: str, precision: int | None) -> bool | None:
    """One side has ±: compare both as sets of values against the other's ± pair, bare list or single value."""
    sides, kinds = [], set()
    for text in (gold, pred):
        seq = split_top_level(text)
        kinds.add("" if seq is None else seq[0])
        items = _expand_pm(seq[1] if seq is not None else (text,))
        if items is None:
            return None
        sides.append(items)
    if kinds not in ({""}, {"\\{"}):
        return None  # tuples, or a set against a bare list: left to math-verify
    return _unordered_equal(sides[0], sides[1], precision)


# ---- putting it together ---------------------------------------------------------------------------------


def _structural_equal(gold: str, pred: str, precision: int | None) -> tuple[bool, bool | None]:
    """(applies, verdict) for the structural paths listed in the module docstring."""
    if _assignment(gold) is not None or _assignment(pred) is not None:
        return True, _relation_equal(gold, pred, precision)
    g_lin, p_lin = _linear_equation(gold), _linear_equation(pred)
    if g_lin is not None and p_lin is not None:
        return True, _linear_equations_equal(g_lin, p_lin)
    g_mat, p_mat = _matrix(gold), _matrix(pred)
    if g_mat is not None and p_mat is not None:
        return True, _matrix_equal(g_mat, p_mat, precision)
    g_base, p_base = _BASED.match(canonical(gold)), _BASED.match(canonical(pred))
    if g_base is not None and p_base is not None:
        if int(g_base.group(2)) != int(p_base.group(2)):
            return True, None
        return True, int(g_base.group(1)) == int(p_base.group(1))
    g_iv, p_iv = _components(gold), _components(pred)
    if g_iv is not None and p_iv is not None:
        both_open_pairs = all(
            c[0] == "(" and c[-1] == ")" and not _CUP.search(c) for c in (canonical(gold), canonical(pred))
        )
        if not both_open_pairs:  # (a, b) vs (c, d) may be points: the tuple rule below decides those
            return True, _intervals_equal(g_iv, p_iv, precision)
    return False, None


def _unordered_equal(
    g_items: tuple[str, ...], p_items: tuple[str, ...], precision: int | None
) -> bool | None:
    """Sets and bare lists (math-verify compares them as sets): True for an order-free matching of equal
    length, False when some element is certainly not on the other side."""
    table = [[element_equal(g, p, precision) for p in p_items] for g in g_items]
    if any(all(v is False for v in row) for row in table):
        return False
    if any(all(row[j] is False for row in table) for j in range(len(p_items))):
        return False
    if len(g_items) != len(p_items):
        return None
    remaining = set(range(len(p_items)))
    for row in table:
        hit = next((j for j in sorted(remaining) if row[j] is True), None)
        if hit is None:
            return None
        remaining.remove(hit)
    return True


def fast_equal(gold: str, pred: str, precision: int | None = None) -> bool | None:
    """Fast verdict for two answers: strings and numbers, the structural paths of the module docstring, then
    simple expressions evaluated numerically (:mod:`corl_vl.answers.numeric_eval`), looking one level into
    tuples, intervals, sets and bare lists."""
    verdict = atom_equal(gold, pred, precision)
    if verdict is not None:
        return verdict
    applies, verdict = _structural_equal(gold, pred, precision)
    if applies:
        return verdict
    if _pm_items(gold) is not None or _pm_items(pred) is not None:
        return _pm_equal(gold, pred, precision)
    g_seq, p_seq = split_top_level(gold), split_top_level(pred)
    if g_seq is None or p_seq is None:
        return numeric_equal(light(gold), light(pred)) if g_seq is None and p_seq is None else None
    (g_open, g_items, g_close), (p_open, p_items, p_close) = g_seq, p_seq
    if (g_open, g_close) != (p_open, p_close):
        return None
    if g_open in ("", "\\{"):
        g_all, p_all = _expand_pm(g_items), _expand_pm(p_items)  # \\{1 \\pm \\sqrt{5}, -2\\}
        return None if g_all is None or p_all is None else _unordered_equal(g_all, p_all, precision)
    if len(g_items) != len(p_items):
        return None
    verdicts = [element_equal(g, p, precision) for g, p in zip(g_items, p_items)]
    if all(v is True for v in verdicts):
        return True
    if any(v is False for v in verdicts) and g_open == "(" and g_close == ")":
        return False  # ordered tuples (or open intervals) with a differing coordinate
    return None


def clear_caches() -> None:
    """Forget every per-string cache (benchmarks use this to time cold comparisons)."""
    for fn in (
        light,
        canonical,
        parse_number,
        split_top_level,
        _assignment,
        _components,
        _matrix,
        _pm_items,
        _linear_equation,
    ):
        fn.cache_clear()
    numeric_eval._expression_value.cache_clear()
