"""Numeric evaluation of simple LaTeX expressions, to settle most symbolic pairs without sympy.

Wrong answers to symbolic problems (``4\\sqrt{13}`` for ``3\\sqrt{13}``, ``x^3+3x-5`` for ``x^3+3x-6``) would
otherwise each cost math-verify tens of milliseconds. Evaluating both sides in floating point at two fixed
points (variables positive, then negative) settles them: values that differ beyond 1e-6 (relative) at some
point mean the expressions differ; values equal to 1e-10 at both points mean they agree (polynomial identity
testing). Only a small grammar is read: numbers, single-letter variables, + − · / ^, \\frac, \\sqrt (and
\\sqrt[n]), \\pi, e (Euler's number, as math-verify reads it), i, brackets and the functions \\sin \\cos \\tan
\\cot \\sec \\csc \\ln (with a bracketed argument, or one plain factor such as ``\\cot x``; ``\\sin 2x`` is
ambiguous and refused). Anything else — equations, sets, ±, subscripts, \\log (base 10 for math-verify) — is
"cannot tell".

``i`` is the imaginary unit for math-verify, yet ``i^2`` and ``-1`` are different polynomials in a symbol ``i``.
So an expression with ``i`` is also evaluated at a third point where ``i`` is √−1: only a difference there means
False; agreement at the two real points (``i`` as a variable: the same polynomial in ``i``) means True.
This is a hand-written recursive-descent parser over regex tokens; it never calls eval or sympy.
"""

from __future__ import annotations

import cmath
import math
import re
from functools import lru_cache

_FUNCS = ("sin", "cos", "tan", "cot", "sec", "csc", "ln")
_TOKEN = re.compile(
    r"\s*(\d+(?:\.\d+)?|\.\d+|\\frac|\\sqrt|\\pi|\\cdot|\\times"
    rf"|\\(?:{'|'.join(_FUNCS)})(?![a-zA-Z])|[a-zA-Z]|[-+*/^(){{}}\[\]])"
)
_MAX_ABS = 1e12
# Variables are case-insensitive (math-verify lower-cases them); e is Euler's number. ``i`` is a variable at
# the two real points and the imaginary unit at the third (see the module docstring).
_POINTS: tuple[dict[str, complex | float], ...] = (
    {c: 0.31 + 0.173 * k for k, c in enumerate("abcdfghjklmnopqrstuvwxyz")} | {"i": 1.37},
)
_POINTS += ({c: -v for c, v in _POINTS[0].items()}, {**_POINTS[0], "i": 1j})
_WORD = re.compile(r"[a-zA-Z]{3,}")  # "north", "Evelyn": text, not a product of variables
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_HAS_I = re.compile(r"(?<![\\a-zA-Z])i(?![a-zA-Z])")
_STARTS_FACTOR = ("(", "{", "\\frac", "\\sqrt", "\\pi")

Value = float | complex


class _Fail(Exception):
    pass


def _real(value: Value) -> float:
    """The value as a real number; complex values with an imaginary part are outside the grammar here."""
    if isinstance(value, complex):
        if value.imag != 0:
            raise _Fail
        return value.real
    return value


def _apply(name: str, arg: Value) -> Value:
    x = _real(arg)
    if name == "ln":
        if x <= 0:
            raise _Fail
        return math.log(x)
    if name in ("sin", "cos", "tan"):
        return {"sin": math.sin, "cos": math.cos, "tan": math.tan}[name](x)
    den = {"cot": math.sin(x), "sec": math.cos(x), "csc": math.sin(x)}[name]
    if abs(den) < 1e-9:
        raise _Fail
    return (math.cos(x) if name == "cot" else 1.0) / den


def _starts_factor(tok: str | None) -> bool:
    return tok is not None and (tok[0].isalnum() or tok[0] == "." or tok in _STARTS_FACTOR or _is_func(tok))


def _is_func(tok: str | None) -> bool:
    return tok is not None and tok[0] == "\\" and tok[1:] in _FUNCS


class _Parser:
    def __init__(self, tokens: list[str], env: dict[str, Value]) -> None:
        self.tokens, self.pos, self.env = tokens, 0, env

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Fail
        self.pos += 1
        return tok

    def expr(self) -> Value:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _check(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> Value:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in ("*", "\\cdot", "\\times"):
                self.take()
                value = _check(value * self.unary())
            elif tok == "/":
                self.take()
                den = self.unary()
                if den == 0:
                    raise _Fail
                value = _check(value / den)
            elif _starts_factor(tok):
                value = _check(value * self.power())  # implicit multiplication: 3\sqrt{2}, 2x
            else:
                return value

    def unary(self) -> Value:
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def exponent(self) -> Value:
        tok = self.peek()
        if tok is not None and tok[0].isdigit() and len(tok) > 1:
            raise _Fail  # x^23 means x^{2}3 in LaTeX; not worth reproducing
        return self.unary() if tok == "-" else self.primary()

    def power(self) -> Value:
        base = self.primary()
        if self.peek() == "^":
            self.take()
            base = _pow(base, self.exponent())
        return base

    def group(self) -> Value:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value

    def function(self, name: str) -> Value:
        power = None
        if self.peek() == "^":  # \cot^2 x; \sin^{-1} x (arcsin) is refused below
            self.take()
            power = self.exponent()
            if isinstance(power, complex) or power not in (2.0, 3.0, 4.0):
                raise _Fail
        if self.peek() in ("(", "{"):
            arg = self.primary()
        else:  # one plain factor: \cot x, \sin \frac{\pi}{6}; "\sin 2x" is ambiguous, so refused
            arg = self.power()
            if _starts_factor(self.peek()):
                raise _Fail
        value = _check(_apply(name, arg))
        return value if power is None else _pow(value, power)

    def primary(self) -> Value:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return float(tok)
        if tok == "\\pi":
            return math.pi
        if _is_func(tok):
            return self.function(tok[1:])
        if tok == "\\frac":
            num = self.group()
            den = self.group()
            if den == 0:
                raise _Fail
            return _check(num / den)
        if tok == "\\sqrt":
            index = 2.0
            if self.peek() == "[":
                self.take()
                index = _real(self.expr())
                self.take("]")
            radicand = _real(self.group())
            if radicand < 0 or index <= 0:
                raise _Fail
            return _check(radicand ** (1 / index))
        if tok == "(":
            value = self.expr()
            self.take(")")
            return value
        if tok == "{":
            value = self.expr()
            self.take("}")
            return value
        if tok == "e":
            return math.e
        if len(tok) == 1 and tok.isalpha() and tok not in ("E", "I") and tok.lower() in self.env:
            return self.env[tok.lower()]
        raise _Fail  # E, I, unknown symbols


def _pow(base: Value, exponent: Value) -> Value:
    if isinstance(base, complex) or isinstance(exponent, complex):
        exp = _real(exponent)
        if exp != int(exp) or abs(exp) > 64 or (base == 0 and exp < 0):
            raise _Fail
        return _check(base ** int(exp))
    if abs(exponent) > 64 or (base < 0 and exponent != int(exponent)) or (base == 0 and exponent < 0):
        raise _Fail
    return _check(base**exponent)


def _check(value: Value) -> Value:
    if isinstance(value, complex):
        if not cmath.isfinite(value) or abs(value) > _MAX_ABS:
            raise _Fail
        return value
    if not math.isfinite(value) or abs(value) > _MAX_ABS:
        raise _Fail
    return value


def _tokens(s: str) -> list[str] | None:
    tokens, pos = [], 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            return None
        tokens.append(m.group(1))
        pos = m.end()
        if pos < len(s) and s[pos:].isspace():
            break
    return tokens


def expression_value(s: str, point: int = 0) -> Value | None:
    """The value of a simple expression at evaluation point 0, 1 (real) or 2 (``i`` = √−1); None when outside
    the grammar (or over 2,000 characters). Cached: gold answers are compared with many predictions."""
    return None if len(s) > 2000 else _expression_value(s, point)


@lru_cache(maxsize=1 << 16)
def _expression_value(s: str, point: int) -> Value | None:
    if _WORD.search(_COMMAND.sub(" ", s)):
        return None
    tokens = _tokens(s)
    if not tokens or len(tokens) > 200:
        return None
    parser = _Parser(tokens, _POINTS[point])
    try:
        value = parser.expr()
    except (_Fail, OverflowError, ZeroDivisionError, RecursionError, ValueError):
        return None
    return value if parser.pos == len(tokens) else None


def _compare(g: Value | None, p: Value | None) -> bool | None:
    """False: clearly different; True: equal to 1e-10; None: not both evaluable, or only close."""
    if g is None or p is None:
        return None
    scale = max(1.0, abs(g), abs(p))
    if abs(g - p) > 1e-6 * scale:
        return False
    return True if abs(g - p) <= 1e-10 * scale else None


def has_imaginary_unit(s: str) -> bool:
    """Whether ``i`` occurs as a symbol (not inside a command such as ``\\sin``)."""
    return _HAS_I.search(s) is not None


def numeric_equal(gold: str, pred: str) -> bool | None:
    """False when the expressions differ at an evaluation point, True when they agree at both real points (and
    do not differ where ``i`` = √−1), else None."""
    real = [_compare(expression_value(gold, point), expression_value(pred, point)) for point in (0, 1)]
    if not (has_imaginary_unit(gold) or has_imaginary_unit(pred)):
        if False in real:
            return False
        return True if real == [True, True] else None
    at_i = _compare(expression_value(gold, 2), expression_value(pred, 2))
    if at_i is False:
        return False  # differ as complex numbers, hence also as polynomials in a symbol i
    return True if real == [True, True] and at_i is not False else None


_VARIABLE = re.compile(r"[a-df-zA-Z]")  # any letter but e (Euler's number) left once commands are removed


def constant_value(s: str) -> float | None:
    """The real value of a constant expression (no variables, no i), e.g. ``\\frac{5\\pi^2}{4}``; else None."""
    if _VARIABLE.search(_COMMAND.sub(" ", s)):
        return None
    value = expression_value(s, 0)
    return value if isinstance(value, float) else None
