"""Final-answer extraction from a completion, in an explicit, configurable order.

The extracted string is what votes for a peer's pseudo-label, so a wrong extraction is a wrong vote. The
default order (see docs/grading.md) takes the most explicit marker first: the last ``\\boxed{}`` (balanced
braces), then the last ``<answer>…</answer>``, then "the (final) answer is …", then an option letter. A
completion with none of these has *no* answer (None) instead of letting the last number of a ramble vote; that
fallback exists only when asked for (``last_number_fallback=True``).

Every step is a linear scan or a linear-time regular expression; the markers (``\\boxed``, ``<answer>``) are
found anywhere, the prose steps read the last :data:`MAX_READ_CHARS` characters, so a 1 MB hostile response
costs milliseconds. Format characters are removed and lone surrogates replaced first
(:mod:`corl_vl.answers.clean`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from corl_vl.answers import lenient, mathverify_pool
from corl_vl.answers.clean import for_reading
from corl_vl.answers.equivalence import MAX_BRACE_DEPTH, _max_depth
from corl_vl.answers.lenient import unemphasize
from corl_vl.answers.options import Options, letter_of, parse_options
from corl_vl.answers.units import value_of
from corl_vl.errors import CorlError

DEFAULT_ORDER: tuple[str, ...] = ("boxed", "answer_tag", "answer_phrase", "option_letter")
#: Extraction modes. ``strict`` (the RL default, what peer votes use): explicit markers, or a completion that is
#: nothing but an answer. ``lenient`` (grading and evaluation): also free prose, see corl_vl.answers.lenient.
EXTRACTION_MODES: tuple[str, ...] = ("strict", "lenient")
MODE_ORDERS: dict[str, tuple[str, ...]] = {
    "strict": (*DEFAULT_ORDER, "bare"),
    "lenient": (
        "boxed",
        "answer_tag",
        "marker",
        "lone_letter",
        "option_phrase",
        "bare",
        "stated_value",
        "last_number",
        "math_verify",
    ),
}
#: Seconds math-verify may spend extracting from one response (lenient mode's last resort).
MATH_VERIFY_EXTRACT_TIMEOUT_S = 5.0
#: Answers longer than this are truncated prose, not answers.
MAX_ANSWER_CHARS = 2000
#: The prose steps read only the end of a response (from a word boundary): the final answer is there, and a
#: bounded window keeps every step's cost bounded on hostile megabyte responses (docs/grading.md).
MAX_READ_CHARS = 32_000

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_ANSWER_PHRASE = re.compile(
    r"(?:\b(?:the\s+)?(?:final\s+|correct\s+)?answer\s*(?:is|:)|\*\*answer:?\*\*:?)[ \t]*:?[ \t]*",
    re.IGNORECASE,
)
_LAST_NUMBER = re.compile(r"(?<![A-Za-z\d])-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")  # "AZYUK2A" holds no number
MAX_BARE_CHARS = 100
_MATHY = re.compile(r"[\d\\=+\-*/^<>≤≥√π∞]")
_LETTER_LIST = re.compile(r"^\(?[A-Za-z]\)?\s*(?:,|&|/|\band\b|\bor\b)\s*\(?[A-Za-z]\)?(?:[.),;]|\s|$)")
#: Lenient steps that guess from unmarked prose; skipped when the response declines to answer.
_GUESSES = frozenset({"option_phrase", "stated_value", "last_number", "math_verify"})
GUESS_STEPS = _GUESSES  # steps that guess an answer from prose rather than read a marked one
_NOT_MATH = re.compile(r"[^\x20-\x7e°π√−×÷≤≥≠∞·²³]")
_WORD = re.compile(r"[A-Za-z]{2,}")  # a word outside LaTeX commands: "12 cm" has one, prose has several
# \text{…} whole first ("\text{Evelyn}" is a LaTeX-wrapped answer), environment names with their command
_COMMAND = re.compile(
    r"\\(?:text|textbf|mathrm|mbox)\s*\{[^{}]*\}|\\(?:begin|end)\s*\{[A-Za-z*]+\}|\\[A-Za-z]+"
)


def tail_words(text: str, limit: int) -> str:
    """The last ``limit`` characters, starting after a whitespace so that no number or word is cut in two
    (the last digits of a long number would read as another number); "" when the window has no whitespace."""
    if len(text) <= limit:
        return text
    window = text[-limit:]
    m = re.search(r"\s", window)
    return "" if m is None else window[m.end() :]


def _box_at(text: str, i: int) -> tuple[str, int] | str | None:
    """(content, end) of the box whose command ends at ``i``: balanced braces, or ``\\boxed 5``; None when it
    never closes (a truncated response); :data:`lenient.NO_ANSWER` when it is still open after
    :data:`MAX_ANSWER_CHARS` (too long or too deep to be an answer)."""
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        depth = 0
        for j in range(i, min(n, i + MAX_ANSWER_CHARS + 2)):  # a longer box is prose, not an answer
            ch = text[j]
            if ch == "\\":  # skip escaped characters such as \{ and \}
                continue
            if ch == "{" and (j == 0 or text[j - 1] != "\\"):
                depth += 1
            elif ch == "}" and text[j - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j], j + 1
        if n > i + MAX_ANSWER_CHARS + 2:
            return lenient.NO_ANSWER  # no fallback to a number inside it
        return None  # truncated: the box never closes
    m = re.match(r"[^\s$]+", text[i : i + MAX_ANSWER_CHARS])  # \boxed 5
    return (m.group(0), i + m.end()) if m else None


# What may stand between boxes that together form one answer: "\boxed{1}, \boxed{2} and \boxed{3}".
_BOX_JOIN = re.compile(
    r"^(?:\s|\$|,|;|\\quad|\\qquad|\\[,;: ]|~|\\text\s*\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b|\\\)|\\\()*$"
)
MAX_JOINED_BOXES = 12


def _last_boxes(text: str, k: int) -> list[tuple[int, int]]:
    """(start, end) of the last ``k`` ``\\boxed``/``\\fbox`` commands, found from the end (a response of a
    million boxes costs no more than one of twelve)."""
    found: list[tuple[int, int]] = []
    pos = len(text)
    while len(found) < k:
        start = max(text.rfind("\\boxed", 0, pos), text.rfind("\\fbox", 0, pos))
        if start == -1:
            break
        end = start + (6 if text.startswith("\\boxed", start) else 5)
        if end >= len(text) or not text[end].isalpha():
            found.append((start, end))
        pos = start
    return found[::-1]


def _boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{…}``/``\\fbox{…}`` (braces balanced) or ``\\boxed 5``; None if unbalanced.

    Several boxes that close the response together, separated only by commas, "and", spacing or math
    delimiters ("\\boxed{(2, 2)} and \\boxed{(6, 2)}"), form one answer: their distinct contents joined by
    ", "."""
    boxes = _last_boxes(text, MAX_JOINED_BOXES)
    if not boxes:
        return None
    last = _box_at(text, boxes[-1][1])
    if last is None or isinstance(last, str):
        return last
    parts = [last[0]]
    for prev, nxt in zip(reversed(boxes[:-1]), reversed(boxes[1:])):
        box = _box_at(text, prev[1])
        if not isinstance(box, tuple) or box[1] > nxt[0] or not _BOX_JOIN.match(text[box[1] : nxt[0]]):
            break
        parts.insert(0, box[0])
    unique = list(dict.fromkeys(p.strip() for p in parts))  # a repeated box is one answer, said again
    return parts[-1] if len(unique) == 1 else ", ".join(unique)


def _answer_tag(text: str) -> str | None:
    """The content of the last closed ``<answer>…</answer>`` (the innermost when tags nest), found with two
    reverse searches: a lazy ``<answer>(.*?)</answer>`` scan is quadratic on many unclosed tags."""
    lower = text.lower()
    close = lower.rfind("</answer>")
    if close == -1:
        return None
    start = lower.rfind("<answer>", 0, close)
    if start == -1:
        return None
    last = text[start + len("<answer>") : close]
    inner = _boxed_content(last)
    return inner if inner is not None else last


def _answer_phrase(text: str) -> str | None:
    last = None
    for m in _ANSWER_PHRASE.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() : last.end() + MAX_ANSWER_CHARS]
    boxed = _boxed_content(rest)
    if boxed is not None:
        return boxed
    end = _sentence_end(rest)
    return rest[:end] if end < MAX_ANSWER_CHARS else None  # no end in sight: prose, not an answer


def _sentence_end(rest: str) -> int:
    """End of the first sentence/line, not counting full stops inside $…$ or decimals."""
    in_math = False
    for k, ch in enumerate(rest):
        if ch == "\n":
            return k
        if ch == "$":
            in_math = not in_math
        elif (
            ch == "."
            and not in_math
            and (k + 1 == len(rest) or rest[k + 1].isspace())
            and not lenient.abbreviation(rest, k)
        ):
            return k
    return len(rest)


def _option_letter(text: str, options: Options | None, anywhere: bool = True) -> str | None:
    """A lone letter ("B", "(B)", "B."), a last line opening with "(B)"/"B." or (``anywhere``) the last "(B)"."""
    if options is None:
        return None
    stripped = text.strip()
    letter = letter_of(stripped, options)
    if letter is not None:
        return letter
    lines = stripped.splitlines()
    if lines and not _LETTER_LIST.match(lines[-1].strip()):  # "D, because …" names D; "A, B and D" none
        m = re.match(r"^\s*\(?([A-Za-z])[.):,]\s", lines[-1] + " ")
        if m and letter_of(m.group(1), options) is not None:
            return m.group(1)
    if not anywhere:
        return None
    for m in reversed(list(re.finditer(r"\(([A-Za-z])\)", text))):
        if letter_of(m.group(1), options) is not None:
            return m.group(1)
    return None


def _last_number(text: str) -> str | None:
    last = None
    for m in _LAST_NUMBER.finditer(text):
        last = m.group(0)
    return last.rstrip(",") if last else None


def _bare(text: str, options: Options | None) -> str | None:
    """The whole completion when it is nothing but an answer: one short line such as ``-5``, ``$\\frac{1}{2}$``,
    ``x = 3``, ``12 cm`` or an option's text; prose (two or more words) is not."""
    s = text.strip()
    if not s or len(s) > MAX_BARE_CHARS or "\n" in s:
        return None
    if options is not None and any(_same_text(s, v) for v in options.values if v):
        return s  # an option's text, whatever it holds (numbers in a prose option are not its answer)
    value, unit = value_of(s)
    if unit is not None or value != s:  # "Area $=9 \pi \mathrm{cm}^{2}$", "35°": the whole answer
        return s if _bare(value, None) is not None else None
    if (
        _NOT_MATH.search(s) or "**" in s or "__" in s or _BOXED.search(s) or "<answer>" in s.lower()
    ):  # other scripts, markdown: prose or a marker
        return None
    words = _WORD.findall(_COMMAND.sub(" ", s))
    if not any(ch.isalnum() for ch in s) or len(words) > 1 or not _MATHY.search(s):  # "a" is an article
        return None
    if words and not (re.search(r"\d", s) and s.rstrip(".").endswith(words[0])):  # "12 cm", not "hello"
        return None
    return s


def _same_text(a: str, b: str) -> bool:
    """Two spellings of one option text: case, outer ``$``, a final full stop and spacing do not matter."""
    return plain_text(a) == plain_text(b)


def plain_text(text: str) -> str:
    """Text compared as words: no ``$``, no final full stop, one space between words, lower case."""
    return " ".join(text.replace("$", "").strip().rstrip(".").lower().split())


def _lenient(
    step: Callable[[str, Options | None], str | None],
) -> Callable[[str, Options | None], str | None]:
    """A lenient step reads the text with markdown emphasis removed ("**(C)**" → "(C)")."""
    return lambda text, options: step(unemphasize(text), options)


# A marked answer that is a sentence of its own opens like one: "The largest $n$ is 34", "So it is C".
_SENTENCE_OPENING = re.compile(r"^(?:the|this|that|it|so|thus|therefore|hence|we)\b\s+\S+", re.IGNORECASE)


def _marked(text: str, options: Options | None) -> str | None:
    """The marked answer; a marker that introduces a sentence ("Final Answer: The largest $n$ is 34.", "…:
    The correct option is C.") gives the value or option that sentence states."""
    found = lenient.marker(text)
    if found is None or found is lenient.NO_ANSWER or not _SENTENCE_OPENING.match(found):
        return found
    stated = lenient.option_phrase(found, options) if options is not None else None
    if stated is None:
        stated = lenient.stated_value(found + ".", options)
    return found if stated is None or stated is lenient.NO_ANSWER else stated


def _math_verify(text: str, _options: Options | None) -> str | None:
    tail = tail_words(text, 4 * MAX_ANSWER_CHARS)
    if _max_depth(tail) > MAX_BRACE_DEPTH:  # deep nesting only slows sympy down; no answer is that deep
        return None
    return mathverify_pool.extract(tail, MATH_VERIFY_EXTRACT_TIMEOUT_S)


def strip_dollars(text: str) -> str:
    """``text`` without outer whitespace and matching pairs of outer ``$`` (one linear pass, no copies)."""
    i, j = 0, len(text)
    while True:
        while i < j and text[i].isspace():
            i += 1
        while j > i and text[j - 1].isspace():
            j -= 1
        if j - i < 2 or text[i] != "$" or text[j - 1] != "$":
            return text[i:j]
        i, j = i + 1, j - 1


def _clean(answer: str | None, options: Options | None) -> str | None:
    if answer is None:
        return None
    s = strip_dollars(answer)
    s = s.rstrip(".").strip()
    if options is not None:  # "B because …" / "(B) 145°" → the letter; "A, B and D" names no single one
        if any(_same_text(s, v) for v in options.values if v):
            return s  # an option's own text ("A circle") is never read as a letter
        if _LETTER_LIST.match(s):
            return None
        m = re.match(r"^\(?([A-Za-z])\)?(?:[.):,]|\s|$)", s)
        if m and letter_of(m.group(1), options) is not None:
            return m.group(1)
    if not s or len(s) > MAX_ANSWER_CHARS:
        return None
    return s


def extract_answer(
    text: str,
    choices: Sequence[str] | None = None,
    *,
    mode: str = "strict",
    order: Sequence[str] | None = None,
    last_number_fallback: bool = False,
) -> str | None:
    """The final answer of one completion, or None when it gives none.

    Args:
        text: the completion.
        choices: option texts of a multiple-choice question (enables option letters; see
            :func:`corl_vl.answers.options.parse_options` for when lower-case letters count).
        mode: ``strict`` (default; peer votes) or ``lenient`` (grading; free prose too), see
            :data:`MODE_ORDERS` and docs/grading.md.
        order: extraction steps to try instead of the mode's, first hit wins; names from :data:`MODE_ORDERS`
            and ``answer_phrase``.
        last_number_fallback: append ``last_number`` to the order (the public release's behaviour).
    """
    if mode not in MODE_ORDERS:
        raise CorlError(f"unknown extraction mode {mode!r}; choose from {list(EXTRACTION_MODES)}")
    options = parse_options(choices) if choices else None
    steps = list(MODE_ORDERS[mode] if order is None else order)
    if last_number_fallback and "last_number" not in steps:
        steps.append("last_number")
    unknown = [name for name in steps if name not in _STEPS]
    if unknown:
        raise CorlError(f"unknown answer extraction step {unknown[0]!r}; choose from {sorted(_STEPS)}")
    text = for_reading(text)
    if options is not None and len(text) <= MAX_ANSWER_CHARS:
        whole = text.strip()
        if any(_same_text(whole, v) for v in options.values if v):
            return _clean(whole, options)  # the response is one option's text, whatever that text says
    tail = tail_words(text, MAX_READ_CHARS)
    declined: bool | None = None
    for name in steps:
        if name in _GUESSES:  # a response that ends by declining to answer gives no guessed answer
            declined = lenient.declines(unemphasize(tail)) if declined is None else declined
            if declined:
                return None
        raw = _STEPS[name](text if name in _ANYWHERE else tail, options)
        if raw is lenient.NO_ANSWER:
            return None
        found = _clean(raw, options)
        if found is not None:
            return found
    return None


#: Steps that find an explicit marker anywhere in the response (linear string searches).
_ANYWHERE = frozenset({"boxed", "answer_tag"})
_STEPS: dict[str, Callable[[str, Options | None], str | None]] = {
    "boxed": lambda text, _o: _boxed_content(text),
    "answer_tag": lambda text, _o: _answer_tag(text),
    "answer_phrase": lambda text, _o: _answer_phrase(text),
    "option_letter": _option_letter,
    "last_number": lambda text, _o: _last_number(text),
    "bare": _bare,
    "lone_letter": lambda text, options: _option_letter(unemphasize(text), options, anywhere=False),
    "marker": _lenient(lambda text, options: _marked(text, options)),
    "option_phrase": _lenient(lenient.option_phrase),
    "stated_value": _lenient(lenient.stated_value),
    "math_verify": _math_verify,
}
