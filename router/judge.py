"""Judges: was the cheap tier's answer good enough, given the strong tier's answer beside it?

A judge returns 1.0 (the cheap answer was good enough), 0.0 (it was not) or None (cannot tell: the
outcome is then not recorded, since a guessed label would teach the memory noise). The outcome memory
stores `needs_strong = 1 - verdict`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from router.answers import final_answer

__all__ = ["GRADER_SYSTEM", "AgreementJudge", "Judge", "grader_messages", "grader_verdict"]


class Judge(Protocol):
    def verdict(self, question: str, cheap: str, strong: str) -> float | None: ...


class AgreementJudge:
    """Final-answer agreement for closed-form answers (a choice letter, a number, a code block).

    Free prose has no final answer to compare (two different wordings may both be right), so a "text"
    or empty answer on either side is None rather than a disagreement.
    """

    def verdict(self, question: str, cheap: str, strong: str) -> float | None:
        a, b = final_answer(question, cheap), final_answer(question, strong)
        if a.kind in ("empty", "text") or b.kind in ("empty", "text"):
            return None
        return 1.0 if a.agrees(b) else 0.0


# The grader judge: the strong tier grades the cheap answer against its own (open-ended answers, where
# final answers cannot be compared). The prompt and the parsing are pure; the gateway makes the call.
GRADER_SYSTEM = (
    "You grade answers. Given a question, a reference answer and a candidate answer, decide whether "
    "the candidate is as correct and as useful as the reference. Reply with one word: YES or NO."
)
# Each side is cut to this many characters: the grading call's size stays bounded whatever the answers.
_GRADER_CHARS = 8000
_VERDICT = re.compile(r"\b(YES|NO)\b", re.IGNORECASE)


def grader_messages(question: str, cheap: str, strong: str) -> list[dict[str, Any]]:
    """The grading request's chat messages (the strong answer is the reference)."""
    user = (
        f"Question:\n{question[:_GRADER_CHARS]}\n\nReference answer:\n{strong[:_GRADER_CHARS]}\n\n"
        f"Candidate answer:\n{cheap[:_GRADER_CHARS]}\n\nIs the candidate as good as the reference? YES or NO."
    )
    return [{"role": "system", "content": GRADER_SYSTEM}, {"role": "user", "content": user}]


def grader_verdict(reply: str) -> float | None:
    """The grader's first YES/NO word as a verdict; None when it gave neither (no label is recorded)."""
    m = _VERDICT.search(reply)
    if m is None:
        return None
    return 1.0 if m.group(1).upper() == "YES" else 0.0
