"""Final-answer extraction: a hand-written table of responses → expected extracted answer."""

from __future__ import annotations

import time

import pytest

from corl_vl.answers import extract_answer
from corl_vl.errors import CorlError

ABCD = ["3", "4", "5", "6"]

CASES = [
    # (response, choices, expected)
    ("so the area is \\boxed{12}.", None, "12"),
    ("first \\boxed{3}, on reflection \\boxed{4}", None, "4"),  # the last box wins
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", None, "\\frac{1}{\\sqrt{2}}"),  # nested braces
    ("\\boxed{\\{1, 2\\}}", None, "\\{1, 2\\}"),  # escaped braces do not count
    ("answer: $\\boxed 5$", None, "5"),  # \boxed 5
    ("\\fbox{x+1}", None, "x+1"),
    ("\\boxed{3} and then \\boxed{4", None, None),  # truncated last box: no answer, not the earlier one
    ("<answer> 7 </answer>", None, "7"),
    ("<answer>so \\boxed{8}</answer>", None, "8"),
    ("Hence the final answer is $\\frac{3}{4}$. Done.", None, "\\frac{3}{4}"),
    ("The answer is 3.5.", None, "3.5"),
    ("The answer is 3.5 cm\nbecause ...", None, "3.5 cm"),
    ("I think 12 then 13", None, None),  # unboxed ramble: no vote
    ("(C)", ABCD, "C"),
    ("B. 5", ABCD, "B"),
    ("I rule out (A); the correct option is (D)", ABCD, "D"),
    ("The answer is B because it is larger", ABCD, "B"),
    ("\\boxed{(B)}", ABCD, "B"),
    ("Answer: b", ["a) 3", "b) 4"], "b"),  # lower-case labelled options: lower-case letters count
    ("a", ABCD, None),  # upper-case options: a lone "a" is not a letter
    ("(E)", ABCD, None),  # not an option
    ("", None, None),
    ("\\boxed{}", None, None),
]


@pytest.mark.parametrize(("response", "choices", "expected"), CASES)
def test_extraction_table(response: str, choices: list[str] | None, expected: str | None) -> None:
    assert extract_answer(response, choices) == expected


def test_last_number_only_when_configured() -> None:
    assert extract_answer("so 1,234 apples and 12") is None
    assert extract_answer("so 1,234 apples and 12", last_number_fallback=True) == "12"
    assert extract_answer("we get -3/4.", last_number_fallback=True) == "-3/4"


def test_order_is_configurable() -> None:
    text = "<answer>7</answer> but \\boxed{8}"
    assert extract_answer(text) == "8"
    assert extract_answer(text, order=["answer_tag", "boxed"]) == "7"
    with pytest.raises(CorlError, match="unknown answer extraction step 'nope'"):
        extract_answer(text, order=["nope"])


def test_adversarial_inputs_are_linear_time() -> None:
    nested = "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}"
    huge = "the answer is " + "1" * 100_000
    many_boxes = "\\boxed{1}" * 20_000
    start = time.process_time()  # CPU seconds: a loaded machine stretches wall time, not the work done
    assert extract_answer(nested) is None  # balanced, but 10,001 characters is not an answer
    assert extract_answer("\\boxed{" + "{" * 400 + "1" + "}" * 400 + "}") == "{" * 400 + "1" + "}" * 400
    assert extract_answer(huge) is None  # over MAX_ANSWER_CHARS: prose, not an answer
    assert extract_answer(many_boxes) == "1"
    assert extract_answer("(" * 50_000, ABCD) is None
    assert time.process_time() - start < 2.0
