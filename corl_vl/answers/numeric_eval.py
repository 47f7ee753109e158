"""Numeric evaluation of simple LaTeX expressions, to settle most symbolic pairs without sympy.

Wrong answers to symbolic problems (``4\\sqrt{13}`` for ``3\\sqrt{13}``, ``x^3+3x-5`` for ``x^3+3x-6``) would
otherwise each cost math-verify tens of milliseconds. Evaluating both sides in floating point at two fixed
points (variables positive, then negative) settles them: values that differ beyond 1e-6 (relative) at some
point mean the expressions differ; values equal to 1e-10 at both points mean they agree (polynomial identity
testing). Only a small grammar is read (numbers, single-letter variables other than e and i, + − · / ^,
\\frac, \\sqrt, \\pi, brackets); anything else — equations, sets, ±, subscripts, functions — is "cannot tell".
This is a hand-written recursive-descent parser over regex tokens; it never calls eval or sympy.
"""

from __future__ import annotations

import math
import re

_TOKEN = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+|\\frac|\\sqrt|\\pi|\\cdot|\\times|[a-zA-Z]|[-+*/^(){}\[\]])")
_MAX_ABS = 1e12
# Variables are case-insensitive (math-verify lower-cases them); e and i are constants, so not variables.
_POINTS = ({c: 0.31 + 0.173 * k for k, c in enumerate("abcdfghjklmnopqrstuvwxyz")},)
_WORD = re.compile(r"[a-zA-Z]{3,}")  # "north", "Evelyn": text, not a product of variables
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_POINTS += ({c: -v for c, v in _POINTS[0].items()},)


class _Fail(Exception):
    pass


class _Parser:
    def __init__(self, tokens: list[str], env: dict[str, float]) -> None:
        self.tokens, self.pos, self.env = tokens, 0, env

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Fail
        self.pos += 1
        return tok

    def expr(self) -> float:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _check(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> float:
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
            elif tok is not None and (
                tok[0].isalnum() or tok[0] == "." or tok in ("(", "{", "\\frac", "\\sqrt", "\\pi")
            ):
                value = _check(value * self.power())  # implicit multiplication: 3\sqrt{2}, 2x
            else:
                return value

    def unary(self) -> float:
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> float:
        base = self.primary()
        if self.peek() == "^":
            self.take()
            tok = self.peek()
            if tok is not None and tok[0].isdigit() and len(tok) > 1:
                raise _Fail  # x^23 means x^{2}3 in LaTeX; not worth reproducing
            exponent = self.unary() if tok == "-" else self.primary()
            if abs(exponent) > 64 or (base < 0 and exponent != int(exponent)) or (base == 0 and exponent < 0):
                raise _Fail
            base = _check(base**exponent)
        return base

    def group(self) -> float:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value

    def primary(self) -> float:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return float(tok)
        if tok == "\\pi":
            return math.pi
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
                index = self.expr()
                self.take("]")
            radicand = self.group()
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
        if len(tok) == 1 and tok.isalpha() and tok.lower() in self.env:
            return self.env[tok.lower()]
        raise _Fail  # e, i, unknown symbols


def _check(value: float) -> float:
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


def evaluate(s: str, point: int = 0) -> float | None:
    """The value of a simple expression at evaluation point 0 or 1; None when outside the grammar."""
    if _WORD.search(_COMMAND.sub(" ", s)):
        return None
    tokens = _tokens(s)
    if not tokens or len(tokens) > 200:
        return None
    parser = _Parser(tokens, _POINTS[point])
    try:
        value = parser.expr()
    except (_Fail, OverflowError, ZeroDivisionError, RecursionError):
        return None
    return value if parser.pos == len(tokens) else None


def numeric_equal(gold: str, pred: str) -> bool | None:
    """False when the expressions differ at an evaluation point, True when they agree at both, else None."""
    agree = 0
    for point in (0, 1):
        g, p = evaluate(gold, point), evaluate(pred, point)
        if g is None or p is None:
            continue
        scale = max(1.0, abs(g), abs(p))
        if abs(g - p) > 1e-6 * scale:
            return False
        if abs(g - p) <= 1e-10 * scale:
            agree += 1
    return True if agree == 2 else None
