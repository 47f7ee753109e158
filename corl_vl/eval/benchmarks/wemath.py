"""We-Math (``We-Math/We-Math``; repository ``data/testmini.json`` with images under ``2steps/``, ``3steps/``).

Rows sharing ``ID`` form a problem group (``2steps_1``, ``2steps_2``, ``2steps_multi`` or the 3-step keys); the
record id is ``ID + "/" + key`` and the group and step travel in ``meta`` for the 4-D metrics.
"""

from __future__ import annotations

import re
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.benchmark_rows import RowContext, answer_text, as_text, record_images, require

# "A. 300, 400;B. 400, 300;C. 3000, 4000; E. No correct answer": the next letter and a dot open each option,
# after a ";" or a space and before some text. Real rows also hold "A. 45° B. 60° ;C. 120°" and figure labels
# such as "to get Shape ;C.; B. …", so letters are searched in order and a marker must be followed by text.
_MARK = "(?:^|(?<=[;\\s]))\\s*{letter}\\s*[.．]\\s*(?=[^;\\s])"
_KEY = re.compile(r"^([23])steps_(\d|multi)$")


def parse_options(text: str) -> list[str]:
    """Option texts in letter order from We-Math's one-line ``option`` field."""
    marks: list[re.Match[str]] = []
    pos = 0
    for k in range(8):
        mark = re.compile(_MARK.format(letter=chr(ord("A") + k))).search(text, pos)
        if mark is None:
            break
        marks.append(mark)
        pos = mark.end()
    options = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        options.append(text[mark.end() : end].strip().rstrip(";").strip())
    return options


def to_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    group = as_text(require(row, "ID", ctx))
    key = as_text(require(row, "key", ctx))
    rid = f"{group}/{key}"
    match = _KEY.match(key)
    if not match:
        raise CorlError(
            f"{ctx.where(rid)}: field 'key' is '{key}', expected 2steps_1..2, 3steps_1..3 or *_multi"
        )
    option_text = str(require(row, "option", ctx, rid))
    options = parse_options(option_text)
    answer = answer_text(require(row, "answer", ctx, rid), ctx, rid)
    if not options or ord(answer[:1] or "?") - ord("A") not in range(len(options)):
        raise CorlError(f"{ctx.where(rid)}: answer '{answer}' is not one of the letters of field 'option'")
    meta = {
        "group": group,
        "key": key,
        "steps": int(match.group(1)),
        "step": match.group(2),  # "1".."3" or "multi"
        "knowledge_concept": row.get("knowledge concept", "unknown"),
    }
    images = record_images(row, ("image_path",), ctx, rid)
    question = str(require(row, "question", ctx, rid)).strip()
    return Problem(id=rid, question=question, images=images, choices=options, answer=answer, meta=meta)
