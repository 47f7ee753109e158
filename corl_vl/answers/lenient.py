"""Lenient extraction: the final answer of free-form prose, for grading and evaluation (never for peer votes).

Published model outputs rarely box their answer: "The correct option is C.", "答案：B", "**(C)**", "Therefore,
the year … is 2019." Strict extraction gives them no answer, which is right for RL (an unmarked ramble should not
vote) and wrong for grading (the answer is there). The steps below run only after the strict ones failed, each a
linear scan: markers in several languages and their English variants (markdown emphasis removed first), option
phrases, the final sentence that states a number or an option, then the last number; math-verify's own
extraction is the last resort (see :func:`corl_vl.answers.extract.extract_answer`).
"""

from __future__ import annotations

import re

from corl_vl.answers.options import Options, letter_of

_EMPHASIS = re.compile(r"\*\*|__|(?<![\w\\])\*(?=\S)|(?<=\S)\*(?!\w)|`")
# "the (final/correct) answer is", "answer should be", "the answer to this question is", "Answer:", and the
# same marker in Chinese, German, French, Spanish, Russian. The last one in the text wins.
_MARKER = re.compile(
    r"(?:\b(?:final|correct|right|best)\s+)?\banswers?\b>?(?:\s+(?:to|for)\s+(?:the|this|that)\s+"
    r"(?:question|problem|puzzle)s?)?\s*(?:(?:is|would\s+be|will\s+be|should\s+be|must\s+be|=)\b|[:=：])"
    r"|(?m:^)[ \t]*<?answer>?[ \t]+(?=\$|\\\(|\\\[)"  # "Answer \( 9 \)" opening a line
    r"|答案\s*(?:应该?|应当)?\s*(?:是|为|[:：])|(?<![\w])答\s*[:：]|\bAntwort\s*(?:ist|lautet|[:：])"
    r"|\bRéponse\s*(?:est|[:：])|\brespuesta\s*(?:es|[:：])|Ответ\s*[:：]",
    re.IGNORECASE,
)
_OPTION_PHRASE = re.compile(
    r"\b(?:option|choice|answer)s?\s*(?:is\s*|:\s*)?[\(\[]?([A-Za-z])[\)\]]?(?![\w'’])", re.IGNORECASE
)
_PAREN_LETTER = re.compile(r"\(([A-Za-z])\)")
_NUMBER = re.compile(
    r"(?<![\w.])-?\d+,\d{1,2}(?![\d,])|(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|(?<![\w.])-?\.\d+%?"
)  # decimal commas ("2,5"), thousands separators, decimals, ".4", percent
_SENTENCE = re.compile(r"(?<=[.!?。])\s+(?=\S)|\n+")
# Where the stated value starts in a conclusion: after the last "is/are/=/equals/be/of/:" of the sentence.
_STATING = re.compile(r"\b(?:is|are|was|were|equals?|be|of|gives?|get)\b|[=:≈]|\\approx", re.IGNORECASE)
MAX_SENTENCE_CHARS = 400
_DELIMITED = re.compile(r"^\\[(\[]\s*(.*?)\s*\\[)\]]$", re.DOTALL)
# "I think it's C." / "so I choose (B)": a closing sentence that ends on an option letter.
_ENDS_ON_LETTER = re.compile(
    r"(?:\bis|\bbe|'s|\bchoose|\bpick|\bselect|\bgo with)\s+\(?([A-Z])\)?\s*[.!]?\s*$", re.IGNORECASE
)
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER_WORD = re.compile(rf"\b({'|'.join(_NUMBER_WORDS)})\b", re.IGNORECASE)
#: Returned by a step that found a hedge ("(B) 13 and (C) 26"): the response has no answer, stop looking.
NO_ANSWER = "\x00no answer"
_SPAN = re.compile(r"\$([^$]{1,200})\$|\\\((.{1,200}?)\\\)")
_INEQUALITY = re.compile(r"<|>|≤|≥|≠|\\(?:le|ge|leq|geq|neq|ne|lt|gt)(?:slant)?(?![a-zA-Z])")
_MATH_SPAN = re.compile(r"\s*(?:approximately\s+|about\s+)?(?:\$([^$]{1,200})\$|\\\((.{1,200}?)\\\))")
# A closing statement that declines to answer: the numbers and letters before it are not an answer.
_DECLINES = re.compile(
    r"\b(?:cannot|can ?not|can't|unable to|impossible to|not possible to|isn't possible|is not possible"
    r"|no way to)\b[^.]{0,200}?\b(?:determine|answer|solve|calculate|find|provide|compute|say|tell|be found|complete)"
    r"|\bplease provide\b|\b(?:not|n't) (?:enough|sufficient) information\b|\bmore (?:information|details)\b"
    r"|\bis missing\b|\bnone of the (?:options|choices|answers)\b|\b(?:not|n't) (?:among|in) the (?:options|choices)\b"
    r"|\b(?:an? )?(?:error|mistake|typo)s? in the (?:problem|question|options|choices)"
    r"|\b(?:problem|question) (?:seems|is|appears) (?:to be )?(?:flawed|incomplete|unclear|not clear)",
    re.IGNORECASE,
)


def unemphasize(text: str) -> str:
    """Markdown emphasis and code marks removed: ``**(C)**`` → ``(C)``, ``*Answer:*`` → ``Answer:``."""
    return _EMPHASIS.sub("", text)


def _until_sentence_end(rest: str) -> str | None:
    """The rest of the sentence/line (full stops inside $…$ and decimals do not end it); None if it is prose."""
    in_math = False
    for k, ch in enumerate(rest):
        if ch == "\n" or ch == "。":
            return rest[:k] if k else None
        if ch == "$":
            in_math = not in_math
        elif (
            ch in ".!?"
            and not in_math
            and (k + 1 == len(rest) or rest[k + 1].isspace())
            and not (ch == "." and abbreviation(rest, k))
            and not (k and rest[k - 1] == "\\")  # \! is LaTeX
        ):
            return rest[:k]
        if k > MAX_SENTENCE_CHARS:
            return None
    return rest


def _broken_inline_math(rest: str) -> bool:
    """Whether ``rest`` opens inline math (``$`` or ``\\(``) that breaks a line before it closes: inline
    math never spans lines (``$$`` and ``\\[`` may)."""
    if rest.startswith("$") and not rest.startswith("$$"):
        close = rest.find("$", 1)
    elif rest.startswith("\\("):
        close = rest.find("\\)", 2)
    else:
        return False
    return "\n" in (rest[1:close] if close != -1 else rest[1:])


def abbreviation(text: str, k: int) -> bool:
    """Whether the full stop at ``text[k]`` closes a dotted abbreviation such as "S.A." or "e.g." (letter,
    dot, letter, dot) rather than a sentence."""
    return k >= 3 and text[k - 1].isalpha() and text[k - 2] == "." and text[k - 3].isalpha()


def marker(text: str) -> str | None:
    """The text after the last answer marker, up to the end of its sentence; the next line when the marker
    ends its line ("**Answer:**\\n42")."""
    last = None
    for m in _MARKER.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() : last.end() + 4 * MAX_SENTENCE_CHARS].lstrip(" \t:：")
    if rest.startswith("\n"):
        rest = rest.lstrip()
    if _broken_inline_math(rest):
        return NO_ANSWER  # the marked answer is malformed math: no answer rather than a guess
    for left, right in (("$$", "$$"), ("\\[", "\\]")):  # display math may span lines
        close = rest.find(right, len(left)) if rest.startswith(left) else -1
        if close != -1:
            return rest[len(left) : close].strip() or None
    found = _until_sentence_end(rest)
    if found is None:
        return None
    found = _DELIMITED.sub(r"\1", found.strip().strip(",;").strip())  # "\(\frac{1}{2}\)" → "\frac{1}{2}"
    return found or None


def declines(text: str) -> bool:
    """Whether the response ends by declining to answer ("… cannot be determined. Please provide …")."""
    return any(_DECLINES.search(s) for s in _sentences_from_end(text)[:2])


def option_phrase(text: str, options: Options | None) -> str | None:
    """The last "option C" / "choice (B)" / "answer: B" naming a valid letter; then the last "(B)". None when
    that sentence names several options ("the correct answers are (B) 13 and (C) 26")."""
    if options is None:
        return None
    ending = _ENDS_ON_LETTER.search(text[-MAX_SENTENCE_CHARS:])
    if ending is not None and ending.group(1).isupper() and letter_of(ending.group(1), options) is not None:
        return ending.group(1)
    for pattern in (_OPTION_PHRASE, _PAREN_LETTER):
        for m in reversed(list(pattern.finditer(text))):
            letter = letter_of(m.group(1), options)
            if letter is None:
                continue
            start = max(text.rfind(".", 0, m.start()), text.rfind("\n", 0, m.start())) + 1
            end = min(
                (k for k in (text.find(". ", m.end()), text.find("\n", m.end())) if k != -1),
                default=len(text),
            )
            named = {
                x
                for p in (_OPTION_PHRASE, _PAREN_LETTER)
                for n in p.finditer(text[start:end])
                if (x := letter_of(n.group(1), options)) is not None
            }
            return letter if len(named) <= 1 else NO_ANSWER
    return None


def _sentences_from_end(text: str) -> list[str]:
    tail = text[-8 * MAX_SENTENCE_CHARS :]
    return [s for s in reversed(_SENTENCE.split(tail)) if s.strip()][:6]


def stated_value(text: str, options: Options | None) -> str | None:
    """From the last sentence that states a number (or names one option), the value it states.

    "Therefore, the year in which … is 2019." → "2019": the first number after the sentence's last "is / = /
    equals / :", or its last number when there is no such word.
    """
    for sentence in _sentences_from_end(text):
        if len(sentence) > MAX_SENTENCE_CHARS:
            continue
        if options is not None:
            named = [i for i, v in enumerate(options.values) if v and _names(sentence, v)]
            if len(named) == 1:
                return options.values[named[0]]
            if len(named) > 1:
                return NO_ANSWER  # a hedge between options states no answer
        relation = _last_inequality(sentence)
        if relation is not None:  # "Therefore $x \\geq 5$ is the solution." states x ≥ 5, not 5
            return relation
        numbers = list(_NUMBER.finditer(sentence))
        if not numbers:
            word = _NUMBER_WORD.search(sentence, _last_stating(sentence))  # "the number of cats is eight."
            if word is not None:
                return _NUMBER_WORDS[word.group(1).lower()]
            continue
        found: str | None = None
        cut = None
        for m in _STATING.finditer(sentence):
            cut = m.end()
            math = _MATH_SPAN.match(sentence, cut)
            if math is not None:  # "the area is $\frac{3}{4}$": the whole expression, not its first digit
                found = (math.group(1) or math.group(2)).strip()
        if found is not None:
            return found
        after = [n for n in numbers if cut is not None and n.start() >= cut]
        return (after[0] if after else numbers[-1]).group(0)
    return None


def _last_inequality(sentence: str) -> str | None:
    """The last ``$…$`` / ``\\(…\\)`` span of the sentence that states an inequality, or None."""
    found = None
    for m in _SPAN.finditer(sentence):
        span = (m.group(1) or m.group(2) or "").strip()
        if _INEQUALITY.search(span):
            found = span
    return found


def _last_stating(sentence: str) -> int:
    """Where the stated value starts: after the sentence's last "is / = / equals / :"; the end if none."""
    cut = len(sentence)
    for m in _STATING.finditer(sentence):
        cut = m.end()
    return cut


def _names(sentence: str, value: str) -> bool:
    """Whether a sentence mentions an option's text as a whole word/number (not inside a longer one)."""
    v = value.strip()
    if len(v) < 2 and not v.isdigit():
        return False
    return re.search(rf"(?<![\w.]){re.escape(v)}(?![\w]|\.\d)", sentence, re.IGNORECASE) is not None


def last_number(text: str) -> str | None:
    """The last number in the text (thousands separators and a percent sign kept)."""
    last = None
    for m in _NUMBER.finditer(text):
        last = m.group(0)
    return last
