"""Model text made safe to read and to write: invisible format characters removed, lone surrogates replaced.

Model output is untrusted text. A zero-width space inside ``\\boxed{1\u200b2}`` is invisible to a reader yet
splits the number for every rule, so format characters (Unicode category Cf: zero-width spaces and joiners,
bidi marks, the byte-order mark, soft hyphens) are removed before extraction. A lone surrogate (``\\ud800``,
which a tokenizer or a JSON escape can produce) cannot be encoded as UTF-8: it becomes U+FFFD, and the writer
counts the replacements instead of dropping the text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


@lru_cache(maxsize=1)
def _format_chars() -> re.Pattern[str]:
    """One character class of every Cf code point, built on first use. Only planes 0, 1 and 14 hold format
    characters (the others are ideographs, unassigned or private use), so only they are scanned."""
    ranges: list[tuple[int, int]] = []
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(cp)) == "Cf":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    body = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges
    )
    return re.compile(f"[{body}]")


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    return _SURROGATE.subn(REPLACEMENT, text)


def for_reading(text: str) -> str:
    """What extraction reads: lone surrogates replaced, format characters (Cf) removed."""
    if text.isascii():
        return text
    return _format_chars().sub("", replace_surrogates(text)[0])


def encodable(value: object) -> tuple[object, int]:
    """A JSON-like value (str, list, dict, …) with every lone surrogate in its strings replaced, and the count."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, list | tuple):
        items = [encodable(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        pairs = {k: encodable(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, sum(n for _, n in pairs.values())
    return value, 0
