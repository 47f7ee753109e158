"""MathVerse's official judge, as rules: is an extracted answer *consistent* with the standard answer?

The official ``score_answer_s2.py`` asks GPT with the few-shot prompt ``demo_prompt_score`` of
``evaluation/prompts.py`` unless ``--quick_match`` is given. Its rule: "only when the [Model_answer] completely
matches the [Standard Answer] means they are consistent. For non-multiple-choice questions, if the meaning is
expressed in the same way, it is also considered consistent, for example, 0.5m and 50cm." Its five examples
(tested in ``tests/test_mathverse_judge.py``):

1. interval ``(-2,1]`` vs ``\\((-2, 1)\\)`` → 0 (another interval);
2. multiple choice, standard ``C`` vs ``B:2√{3}`` (another option, letter and text) → 0;
3. ``domain: [-4, 0) and range: (-3, 1]`` vs ``Range: \\((-4, 1]\\)`` (part of it, wrong) → 0;
4. ``C`` vs ``null`` (no answer) → 0;
5. multiple choice, standard ``A`` vs the text of option A (``\\frac{x^2}{81} + \\frac{y^2}{9} = 1``) → 1.

As rules: an extraction is consistent when it is the answer as written (the quick match); for a multiple-choice
answer when it names the gold letter or states the gold option's text (example 5), a multiple-select gold
(``C\\nD``) when it names the same letters; otherwise when it means the same: equivalent numbers and
expressions, intervals, equations, the gold's label and unit dropped (the extraction prompt drops units,
"22.3 meters" → ``22.3``) or a unit converted (``0.5 m`` and ``50 cm``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from corl_vl.answers import equivalent
from corl_vl.answers.numeric_eval import constant_value
from corl_vl.answers.units import value_of
from corl_vl.eval.scoring.base import letter_gold_equivalent, states_gold

# Length, area, volume, mass and time units in a base unit of their dimension (m, m², m³, kg, s).
_LENGTH = {"mm": 1e-3, "cm": 1e-2, "dm": 0.1, "m": 1.0, "km": 1e3, "in": 0.0254, "ft": 0.3048, "yd": 0.9144}
_FACTORS: dict[str, tuple[str, float]] = {
    **{u: ("L", f) for u, f in _LENGTH.items()},
    **{f"{u}^2": ("L2", f**2) for u, f in _LENGTH.items()},
    **{f"{u}^3": ("L3", f**3) for u, f in _LENGTH.items()},
    "l": ("L3", 1e-3),
    "ml": ("L3", 1e-6),
    "g": ("M", 1e-3),
    "kg": ("M", 1.0),
    "s": ("T", 1.0),
    "min": ("T", 60.0),
    "h": ("T", 3600.0),
}
_MULTI_SELECT = re.compile(r"^[A-Z](?:[\s,;]+[A-Z])+$")
# MathVerse's data holds "°" mis-decoded as GBK ("掳").
_MISDECODED_DEGREE = "掳"


def letters(text: str) -> tuple[str, ...] | None:
    """The option letters of a multiple-select answer (``C\\nD``, ``A, C``), sorted; None otherwise."""
    s = text.strip().strip("$").strip()
    if not _MULTI_SELECT.match(s):
        return None
    return tuple(sorted(set(re.findall(r"[A-Z]", s))))


def converted_equal(gold: str, extracted: str) -> bool | None:
    """Whether two values with units of one dimension are equal after conversion (``0.5 m`` and ``50 cm``);
    None when either has no known unit or a value that is not a plain number."""
    (g_value, g_unit), (e_value, e_unit) = value_of(gold), value_of(extracted)
    if g_unit is None or e_unit is None or g_unit == e_unit:
        return None
    g_dim, e_dim = _FACTORS.get(g_unit), _FACTORS.get(e_unit)
    if g_dim is None or e_dim is None or g_dim[0] != e_dim[0]:
        return None
    g, e = constant_value(g_value), constant_value(e_value)
    if g is None or e is None:
        return None
    return abs(g * g_dim[1] - e * e_dim[1]) <= 1e-6 * max(1.0, abs(g * g_dim[1]))


def consistent(gold: str | None, extracted: str | None, choices: Sequence[str] | None) -> bool:
    """The judge's verdict (see the module docstring): 1 → True, 0 → False."""
    if gold is None or extracted is None or not extracted.strip():
        return False
    if extracted.strip() == gold.strip():
        return True
    gold = gold.replace(_MISDECODED_DEGREE, "°")
    extracted = extracted.replace(_MISDECODED_DEGREE, "°")
    gold_letters = letters(gold)
    if gold_letters is not None and choices:
        return letters(extracted) == gold_letters
    if choices:  # the option's letter or its text, nothing else (examples 2 and 5)
        return letter_gold_equivalent(gold, extracted, choices)
    converted = converted_equal(gold, extracted)
    if converted is not None:
        return converted
    return bool(equivalent(gold, extracted)) or states_gold(extracted, gold)


def said_once(text: str) -> str:
    """An answer written twice on its own lines (``-4.9\\n-4.9``, a MathVerse gold) is that answer once."""
    lines = {line.strip() for line in text.splitlines() if line.strip()}
    return lines.pop() if len(lines) == 1 and "\n" in text.strip() else text
