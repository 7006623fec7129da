"""Final-answer extraction and normalization, so that two answers can be compared for agreement.

Two models rarely answer with the same bytes ("C", "C\n", "C) 13", "The answer is C."), so agreement
compares a normalized *final answer*: its kind says how it was found and its value is canonical.

- choice: the prompt's last question lists options (`A) text` lines, or `"A" or "B"` in the
  instruction); the answer's leading letter, an "answer is X" phrase, or an answer that repeats an
  option's text (winogrande models sometimes answer "Rachel" instead of "A") maps to the letter.
- number: "#### 42", "answer is 42", or the last number of a short answer; "1,000.50" -> "1000.5".
- code: fenced blocks (``` or [PYTHON]) with comments, docstrings, blank lines and indentation
  differences removed. Different correct programs still differ; exact agreement on code is rare.
- text: casefolded, punctuation stripped, whitespace collapsed.

Only the last question of the prompt counts: few-shot prompts list earlier questions with their options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AnswerKind = Literal["choice", "number", "code", "text", "empty"]

_OPTION_LINE = re.compile(r"^\s*\(?([A-H])[\).:]\s*(.+?)\s*$", re.MULTILINE)
_QUOTED_LETTERS = re.compile(r'"([A-H])"\s*(?:,|or)')
_LEADING_LETTER = re.compile(r"^\W{0,3}([A-H])(?:\W|$)")
_ANSWER_IS = re.compile(
    r"(?:answer|option|choice)\s*(?:is|:)?\s*(?:option\s*)?\(?([A-H])\b(?!['\w])", re.IGNORECASE
)
_HASH_NUMBER = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_ANSWER_NUMBER = re.compile(r"answer\s*(?:is|:)?\s*\$?\s*(-?[\d,]*\.?\d+)", re.IGNORECASE)
_ANY_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*|-?\.\d+")
_FENCE = re.compile(r"```[\w+-]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAG = re.compile(r"\[PYTHON\](.*?)(?:\[/PYTHON\]|\Z)", re.DOTALL)
_DOCSTRING = re.compile(r'("""|\'\'\')(.*?)\1', re.DOTALL)
_NON_WORD = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")

# A number-only answer is expected when the last question asks for one; otherwise a digit in a prose
# answer is just prose. Short answers (<= this many chars) that are mostly a number count too.
_SHORT_ANSWER = 40


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    kind: AnswerKind
    value: str

    def agrees(self, other: FinalAnswer) -> bool:
        # Empty answers agree with nothing, not even each other: two refusals are not a confirmation.
        return self.kind != "empty" and self.kind == other.kind and self.value == other.value


def last_question(prompt: str) -> str:
    """The part of the prompt after the last few-shot example (after the last 'Answer:' + answer)."""
    # Few-shot blocks end with "Answer:\nX\n\n"; the real question is the tail after the last such block.
    parts = re.split(r"\n\s*\n", prompt.strip())
    tail: list[str] = []
    for part in reversed(parts):
        tail.insert(0, part)
        if len(part) > 40 or _OPTION_LINE.search(part):
            break
    return "\n\n".join(tail)


def options(question: str) -> dict[str, str]:
    """Letter -> option text for the options listed in `question` (empty when it has none)."""
    found = {m.group(1): m.group(2) for m in _OPTION_LINE.finditer(question)}
    if len(found) >= 2:
        return found
    quoted = _QUOTED_LETTERS.findall(question)
    if len(quoted) >= 1 and re.search(r'or\s*"([A-H])"', question):
        letters = set(quoted) | set(re.findall(r'or\s*"([A-H])"', question))
        return {letter: "" for letter in sorted(letters)}
    return {}


def _choice(text: str, opts: dict[str, str]) -> str | None:
    stripped = text.strip()
    m = _LEADING_LETTER.match(stripped)
    if m and m.group(1) in opts:
        return m.group(1)
    m = _ANSWER_IS.search(stripped)
    if m and m.group(1).upper() in opts:
        return m.group(1).upper()
    low = _norm_text(stripped)
    if low:
        # The answer repeats one option's text (and only one): map it back to that option's letter.
        hits = [k for k, v in opts.items() if v and (low == _norm_text(v) or low.startswith(_norm_text(v)))]
        if len(hits) == 1:
            return hits[0]
    return None


def _number(text: str) -> str | None:
    m = _HASH_NUMBER.search(text) or _ANSWER_NUMBER.search(text)
    raw = m.group(1) if m else None
    if raw is None and len(text.strip()) <= _SHORT_ANSWER:
        nums = _ANY_NUMBER.findall(text)
        raw = nums[-1] if nums else None
    if raw is None:
        return None
    try:
        value = float(raw.replace(",", ""))
    except ValueError:
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def _code(text: str) -> str | None:
    blocks = _FENCE.findall(text) or _PYTHON_TAG.findall(text)
    if not blocks:
        return None
    code = _DOCSTRING.sub("", "\n".join(blocks))
    lines = []
    for line in code.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            lines.append(_SPACES.sub(" ", line))
    return "\n".join(lines) or None


def _norm_text(text: str) -> str:
    return _SPACES.sub(" ", _NON_WORD.sub(" ", text.casefold())).strip()


def final_answer(prompt: str, text: str) -> FinalAnswer:
    """The normalized final answer of `text` as an answer to `prompt` (pure, deterministic)."""
    if not text.strip():
        return FinalAnswer("empty", "")
    opts = options(last_question(prompt))
    if opts:
        letter = _choice(text, opts)
        if letter is not None:
            return FinalAnswer("choice", letter)
    code = _code(text)
    if code is not None:
        return FinalAnswer("code", code)
    number = _number(text)
    if number is not None:
        return FinalAnswer("number", number)
    return FinalAnswer("text", _norm_text(text))
