"""Deterministic chat templates: a pinned date, a record of the exact template used, placeholder checks.

Why: some published chat templates read the clock — Llama-3.2's puts "Today Date: <today>" into a default system
block — so one problem would get different prompt tokens on different days: training vs a later evaluation, a
resumed run, or two renderings either side of midnight. Every adapter therefore renders with a *pinned* date:
templates that call ``strftime_now`` get a clock frozen at that date. The date is a per-adapter default
(:data:`DEFAULT_TEMPLATE_DATE`), overridable per agent (``template_date:`` in a cohort config), written into the
run's ``config.yaml``, and saved with every checkpoint in :data:`PROMPT_RECORD` together with the exact template,
so evaluating a checkpoint later renders the prompts it was trained on.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

# The date Llama-3.x templates fall back to when no clock is available (and Llama-3.1's fixed date): the
# rendering their authors ship when time is unknown, so a pinned prompt looks like a published one.
DEFAULT_TEMPLATE_DATE = "2024-07-26"
PROMPT_RECORD = "corl_prompt.json"  # written next to the weights in every checkpoint folder

__all__ = [
    "DEFAULT_TEMPLATE_DATE",
    "PROMPT_RECORD",
    "parse_template_date",
    "pinned_clock",
    "read_prompt_record",
    "uses_clock",
    "write_prompt_record",
]


def parse_template_date(value: Any, where: str = "template_date") -> _dt.date:
    """``YYYY-MM-DD`` (a string or a ``date``, as YAML may give either) → date; anything else is one clear error."""
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    try:
        return _dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise CorlError(f"{where}: expected a date as YYYY-MM-DD (e.g. 2024-07-26), got {value!r}") from None


def uses_clock(chat_template: str) -> bool:
    """Whether a template reads the clock (transformers exposes ``strftime_now`` to templates for that)."""
    return "strftime_now" in chat_template


def pinned_clock(day: _dt.date) -> dict[str, Callable[[str], str]]:
    """Template variables that freeze the template's clock at midnight of ``day``.

    Render variables shadow the environment's globals in Jinja, so this ``strftime_now`` replaces the one
    transformers registers (which calls ``datetime.now()``).
    """
    moment = _dt.datetime.combine(day, _dt.time())

    def strftime_now(fmt: str) -> str:
        return moment.strftime(fmt)

    return {"strftime_now": strftime_now}


def write_prompt_record(folder: str | Path, record: dict[str, Any]) -> Path:
    """Write the prompt record (template, pinned date, kwargs) into a checkpoint folder."""
    path = Path(folder) / PROMPT_RECORD
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def read_prompt_record(folder: str | Path) -> dict[str, Any] | None:
    """The prompt record of a local checkpoint folder, or None (hub ids, folders not written by corl-vl)."""
    path = Path(folder) / PROMPT_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorlError(f"{path}: not valid JSON ({err}); delete it or restore it from the run") from None
    if not isinstance(record, dict):
        raise CorlError(f"{path}: expected a JSON object")
    return record
