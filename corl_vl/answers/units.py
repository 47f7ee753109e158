"""Labels and units around a stated value: ``Area $=2500 \\pi \\mathrm{~cm}^{2}$`` is the value ``2500 \\pi``.

Benchmark golds and model answers wrap values in a label ("Volume $=…$", "S.A. =", ``\\mathrm{SA}=``) and a
unit (``\\mathrm{~cm}^{2}``, ``\\text{ meters}``, "units $^{3}$", "cm^3", "12h"). A unit is separated from
the value and never read as the value (the ``2`` of ``cm^{2}`` is not an answer); two values with different
units are different answers ("12h" is not "12a"). A label is dropped only when it is words ("Area",
"S.A. of rectangular prism"), never a variable or a function (``y = 2x``, ``f(x) = …`` stay relations).
"""

from __future__ import annotations

import re

from corl_vl.answers.normalize import per_string

# MathVerse's data holds "°" mis-decoded as GBK ("掳"); it is a degree sign like the others.
_DEGREE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|掳|\\degree(?![a-zA-Z]))")
_WRAPPED_UNIT = (
    r"\\(?:mathrm|text|textrm|mbox|operatorname|mathit)\s*\{\s*~?\s*([A-Za-z][A-Za-z ]{0,20})\s*\}"
)
_PLAIN_UNIT = r"([A-Za-z]{1,12}(?:\s+[A-Za-z]{2,12}){0,2})"
_POWER = r"(?:\s*\$?\s*\^\s*\{?\s*([23])\s*\}?\s*\$?|([²³]))?"
_UNIT_TAIL = re.compile(rf"(?:(?<=[\d}}).\s])|(?<=\d))\s*(?:{_WRAPPED_UNIT}|{_PLAIN_UNIT}){_POWER}\s*\.?\s*$")
_VALUE = re.compile(r"^[-+]?(?=\d|\.\d|\\frac|\\dfrac|\\sqrt|\\pi)[\d\s.,{}\\a-z+\-*/^()]*(?:[\d})]|\\pi)$")
_LABEL = re.compile(
    r"^\s*(?:\\(?:mathrm|text)\s*\{\s*([A-Za-z][A-Za-z. ]*)\}|([A-Za-z][A-Za-z.]*(?:\s+[A-Za-z.]+){0,5}))"
    r"\s*\$*\s*=\s*"
)
# A single letter after a number is a variable ("2x") unless it is a unit symbol ("12h", "5m", "3L").
_UNIT_LETTERS = frozenset("mgshlLtTKNJWVA")
_COMMANDS = re.compile(r"\\[A-Za-z]+")
_DELIMS = re.compile(r"^\s*(?:\$\$|\$|\\\(|\\\[)\s*(.*?)\s*(?:\$\$|\$|\\\)|\\\])\s*\.?\s*$", re.DOTALL)


_POWER_WORDS = {"square": "2", "sq": "2", "cubic": "3", "cu": "3"}
# Spelled-out units and their symbols; a symbol maps to itself.
_UNIT_NAMES = {
    **{n: "mm" for n in ("millimeter", "millimetre")},
    **{n: "cm" for n in ("centimeter", "centimetre")},
    **{n: "m" for n in ("meter", "metre")},
    **{n: "km" for n in ("kilometer", "kilometre")},
    **{n: "in" for n in ("inch", "inche")},
    **{n: "ft" for n in ("foot", "feet")},
    "yard": "yd",
    "mile": "mi",
    "gram": "g",
    "kilogram": "kg",
    **{n: "l" for n in ("liter", "litre")},
    **{n: "ml" for n in ("milliliter", "millilitre")},
    "hour": "h",
    "hr": "h",
    "minute": "min",
    "second": "s",
    "sec": "s",
    "day": "d",
    "week": "wk",
    "year": "yr",
    "unit": "units",
    "degree": "deg",
    "dollar": "usd",
    "cent": "ct",
    "percent": "%",
}
_SYMBOLS = frozenset(_UNIT_NAMES.values()) | {"km", "cm", "mm", "m", "g", "kg", "l", "ml", "h", "min", "s"}


def _undelimit(text: str) -> str:
    s = text.strip()
    for _ in range(3):
        m = _DELIMS.match(s)
        if m is None or not m.group(1):
            break
        s = m.group(1)
    return s


@per_string
def strip_label(text: str) -> str:
    """``Area $=2500 \\pi$`` → ``2500 \\pi``; ``$\\mathrm{SA}=3298.67$`` → ``3298.67``; anything else
    unchanged (a one-letter left side is a variable, and ``f(x)``/``(x, y)`` are not labels)."""
    return _strip_label(text, variables=False)


@per_string
def strip_assignment(text: str) -> str:
    """:func:`strip_label`, and also a one-letter left side before a numeric value: ``$C=40.84$`` →
    ``40.84`` (what an extractor that reports only the value writes); ``y = -2x + 5`` stays an equation."""
    return _strip_label(text, variables=True)


def _strip_label(text: str, variables: bool) -> str:
    s = _undelimit(text)
    m = _LABEL.match(s)
    if m is None:
        return text
    label = (m.group(1) or m.group(2) or "").strip()
    letters = len(label.replace(".", "").replace(" ", ""))
    if letters < (1 if variables else 2):
        return text
    rest = s[m.end() :].strip().strip("$").strip()
    if not rest or "=" in rest:
        return text
    value = split_unit(rest)[0]
    if letters == 1 and (_VALUE.match(value) is None or re.search(r"[A-Za-z]", _COMMANDS.sub("", value))):
        return text  # "y = -2x + 5" is an equation; "C = 40.84 cm" states a value
    return rest


@per_string
def split_unit(text: str) -> tuple[str, str | None]:
    """(value, unit) for a value followed by a unit: ``720 \\mathrm{cm}^3`` → ("720", "cm^3"); ``12h`` →
    ("12", "h"); degree marks are dropped (``62^\\circ`` → ("62", None)). (text, None) without a unit."""
    s = _DEGREE.sub("", _undelimit(text)).strip()
    s = _undelimit(s)
    m = _UNIT_TAIL.search(s)
    if m is None:
        return s, None
    value = s[: m.start()].strip().rstrip("$").strip()
    if not value or _VALUE.match(value) is None:
        return s, None
    words = (m.group(1) or m.group(2) or "").split()
    if len(words) == 1 and len(words[0]) == 1 and words[0] not in _UNIT_LETTERS:
        return s, None
    power = m.group(3) or {"²": "2", "³": "3"}.get(m.group(4) or "", "")
    if words and words[0].lower() in _POWER_WORDS and len(words) > 1:  # "square centimeters" is cm^2
        power, words = power or _POWER_WORDS[words[0].lower()], words[1:]
    unit = "".join(words).lower()
    unit = _UNIT_NAMES.get(unit, _UNIT_NAMES.get(unit.rstrip("s"), unit))
    return value, unit + (f"^{power}" if power else "")


def same_unit(a: str, b: str) -> bool | None:
    """Whether two units (as :func:`split_unit` writes them) are the same; None when one is a word this table
    does not know ("apples"), which then does not decide."""
    if a == b:
        return True
    known = all(u.split("^")[0] in _SYMBOLS or len(u.split("^")[0]) <= 2 for u in (a, b))
    return False if known else None


def value_of(text: str) -> tuple[str, str | None]:
    """The value a stated answer gives, without its label and unit, and the unit."""
    return split_unit(strip_label(text))
