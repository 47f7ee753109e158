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

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    return _SURROGATE.subn(REPLACEMENT, text)


def for_reading(text: str) -> str:
    """What extraction reads: lone surrogates replaced, format characters (Cf) removed."""
    if text.isascii():
        return text
    text = replace_surrogates(text)[0]
    # the distinct characters are few even in a long text: test those, then delete in one C pass
    invisible = {ord(ch): None for ch in set(text) if not ch.isascii() and unicodedata.category(ch) == "Cf"}
    return text.translate(invisible) if invisible else text


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
