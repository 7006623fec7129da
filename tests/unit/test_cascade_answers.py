from __future__ import annotations

import pytest

from router.answers import FinalAnswer, final_answer, last_question, options

ARC = (
    "Which gas do plants take in?\nA) oxygen\nB) carbon dioxide\nC) helium\nD) neon\n"
    'Print only a single choice from "A" or "B" or "C" or "D" without explanation.\nAnswer:\nB\n\n'
    "What is the mass of a carbon atom that has 6 protons, 7 neutrons, and 6 electrons?\n"
    "A) 19\nB) 7\nC) 13\nD) 6\n"
    'Print only a single choice from "A" or "B" or "C" or "D" without explanation.\nAnswer:'
)
WINO = (
    "Jeffrey asked Hunter when the wedding was because _ was his best man.\nA) Jeffrey\nB) Hunter\n"
    'Print only a single choice from "A" or "B" without explanation. Answer:'
)


def test_last_question_skips_few_shot_examples() -> None:
    q = last_question(ARC)
    assert q.startswith("What is the mass")
    assert options(q) == {"A": "19", "B": "7", "C": "13", "D": "6"}


@pytest.mark.parametrize(
    ("text", "letter"),
    [("C", "C"), ("C\n", "C"), ("C)", "C"), ("(C) 13", "C"), ("The answer is C.", "C"), ("13", "C")],
)
def test_choice_letters_normalize(text: str, letter: str) -> None:
    assert final_answer(ARC, text) == FinalAnswer("choice", letter)


def test_winogrande_option_text_maps_to_its_letter() -> None:
    assert final_answer(WINO, "Hunter") == FinalAnswer("choice", "B")
    assert final_answer(WINO, "A)") == FinalAnswer("choice", "A")


def test_letter_outside_the_options_is_not_a_choice() -> None:
    assert final_answer(WINO, "D").kind != "choice"


@pytest.mark.parametrize(
    ("text", "value"), [("#### 1,000", "1000"), ("The answer is 2.50", "2.5"), ("42", "42")]
)
def test_numbers_normalize(text: str, value: str) -> None:
    assert final_answer("How many apples?", text) == FinalAnswer("number", value)


def test_code_ignores_comments_docstrings_and_indentation() -> None:
    a = '```python\ndef f(x):\n    """Doc."""\n    return x + 1  # add\n```'
    b = "Here you go:\n```python\ndef f(x):\n  return x + 1\n```\nIt adds one."
    c = "```python\ndef f(x):\n    return x - 1\n```"
    fa, fb, fc = (final_answer("Write a function.", t) for t in (a, b, c))
    assert fa.kind == "code"
    assert fa.agrees(fb)
    assert not fa.agrees(fc)


def test_text_is_casefolded_and_punctuation_free() -> None:
    assert final_answer("Capital of France?", "Paris!").agrees(final_answer("Capital of France?", "  paris "))


def test_empty_answers_never_agree() -> None:
    e = final_answer(ARC, "   ")
    assert e.kind == "empty"
    assert not e.agrees(e)
