"""MATH-V's official rule-based grader, re-implemented (``evaluation/evaluate.py`` + ``utils.py`` semantics).

Published MathVision numbers come from this exact procedure, quirks included, so ``official`` scoring has to
reproduce it rather than improve on it: the extraction takes the text after the last "the answer is"-style flag
or inside the outermost ``\\boxed{…}``, keeps what follows the last "=", lower-cases it and strips LaTeX noise;
the comparison is case-insensitive string equality, then element-wise tuples, then numeric equality after
rounding both sides to 2 decimals. The official code computes those numbers with ``eval`` of a sympy string;
here :func:`corl_vl.answers.numeric_eval.constant_value` computes them without executing anything (constant
expressions only — a symbol is an error there too, hence "not equal").
"""

from __future__ import annotations

import re

from corl_vl.answers.numeric_eval import constant_value

_FLAGS = ("the final answer is", "the answer is", "the correct answer is", "the answer should be")
_OXED = re.compile(r"oxed\{(.*)\}", re.DOTALL)  # greedy: first "oxed{" to the last "}"


def _is_number(s: str) -> bool:
    """What Python's ``float(s)`` accepts (the official ``is_number``); float() parses, it never executes."""
    try:
        float(s)
    except ValueError:
        return False
    return True


def _fix_sqrt(s: str) -> str:
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        out += "\\sqrt{" + part[0] + "}" + part[1:] if part and part[0] != "{" else "\\sqrt" + part
    return out


def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part and part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def _fix_slash(s: str) -> str:
    """``a/b`` with two plain integers (as ``int()`` reads and prints them) becomes ``\\frac{a}{b}``."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _strip(s: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac")):
        s = s.replace(old, new)
    for old in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "$"):
        s = s.replace(old, "")
    s = s.split("\\text{ ")[0]  # a unit after "\text{ " is dropped
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2:
        s = s.split("=")[-1]
    if len(s.split("\\approx")) == 2:
        s = s.split("\\approx")[-1]
    if "sqrt" in s:
        s = _fix_sqrt(s)
    s = s.replace(" ", "")
    if "sqrt" in s:  # the official code only fixes \frac12 when a sqrt is present
        s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_slash(s)


def find_math_answer(s: str) -> str:
    """The official answer cleaner: boxed content, value after the last "=", LaTeX and unit noise removed."""
    s = s.lower().replace("{}", "")
    found = _OXED.findall(s)
    ans = found[-1] if found else s
    close, open_ = ans.find("}"), ans.find("{")
    if close != -1 and (open_ == -1 or close < open_):
        ans = ans.split("}")[0]
    ans = ans.split("=")[-1].split("\\approx")[-1]
    ans = ans.replace(" ", "").replace("\\,", "").replace("∞", "\\infty")
    ans = ans.replace("+\\infty", "\\infty").replace("\\\\", "\\").replace("\n", "")
    ans = ans.replace("\\text", "").replace("\\mbox", "").replace("bmatrix", "pmatrix")
    ans = ans.replace("\\left", "").replace("\\right", "").replace("^{\\circ}", "")
    ans = ans.replace("^\\circ", "").replace("{m}^3", "").replace("m^3", "")
    ans = ans.replace("{units}", "").replace("units", "").replace("{km}", "").replace("km", "")
    return _strip(ans)


def _after_flags(answer: str) -> str:
    for flag in _FLAGS:
        for spelled in (flag, flag.replace("the", "The")):
            had = spelled in answer
            answer = answer.split(spelled)[-1].strip()
            if had:
                answer = answer.split("\n")[0].split(". ")[0]
    return answer


def official_extract(response: str) -> str:
    """The answer MATH-V's ``evaluate.py`` extracts from a response (lower-cased; may be empty)."""
    answer = response.strip()
    for c in "ABCDE":
        if (
            answer.endswith(f" {c}.")
            or answer.endswith(f" ({c}).")
            or answer.startswith((f"{c}\n", f"({c})\n", f"({c}) {c}\n"))
        ):
            answer = c
    tail = answer.split("is ")[-1].rstrip(".")
    if _is_number(tail):
        answer = tail
    if "oxed{" not in answer:
        answer = _after_flags(answer)
    elif answer.count("oxed{") > 1:
        answer = "\\boxed{" + answer.split("oxed{")[-1]
    answer = find_math_answer(answer)
    for letter in "abcde":
        answer = answer.replace(f"({letter})", letter).replace(f"{{{letter}}}", letter)
    return answer.rstrip(".").lstrip(":").strip()


def _round2(s: str) -> float | None:
    value = constant_value(s.strip().strip("$"))  # option texts come as "$3 \\cdot 2^5$"
    return None if value is None else round(value, 2)


def _tuple_form(s: str) -> str:
    """``(a, b)`` / ``[a, b]`` with each element rounded to 2 decimals; unchanged when any element is not a
    constant (the official code returns the input on any error)."""
    if not s or s[0] + s[-1] not in ("()", "[]"):
        return s
    items = s[1:-1].split(",")
    if len(items) < 2:
        return s
    out = []
    for item in items:
        if "infty" in item or item in ("a", "-a"):
            out.append(item)
            continue
        value = _round2(item)
        if value is None:
            return s
        # sympy keeps integers exact (printed "3"), decimals and surds become floats ("3.0")
        out.append(str(int(value)) if value.is_integer() and "." not in item else str(value))
    return s[0] + ",".join(out) + s[-1]


def official_equal(gold: str, answer: str) -> bool:
    """MATH-V's ``is_equal``: case-insensitive equality, tuples element-wise, or equal values to 2 decimals."""
    gold, answer = gold.lower(), answer.lower()
    if not gold.replace(" ", "") or not answer.replace(" ", ""):
        return False
    if gold.strip() == answer.strip():
        return True
    if _tuple_form(gold) == _tuple_form(answer):
        return True
    g, a = _round2(gold), _round2(answer)
    return g is not None and a is not None and g == a


def official_correct(extracted: str, gold: str, options: list[str] | None) -> bool:
    """Correct if the extraction equals the gold answer or, for a letter gold, the gold option's text."""
    gold_value = ""
    if options:
        index = ord(gold[:1] or "?") - ord("A")
        gold_value = options[index] if len(gold) == 1 and 0 <= index < len(options) else ""
    return official_equal(gold, extracted) or official_equal(gold_value, extracted)
