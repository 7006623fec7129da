"""Judges: was the cheap tier's answer good enough, given the strong tier's answer beside it?

A judge returns 1.0 (the cheap answer was good enough), 0.0 (it was not) or None (cannot tell: the
outcome is then not recorded, since a guessed label would teach the memory noise). The outcome memory
stores `needs_strong = 1 - verdict`.
"""

from __future__ import annotations

from typing import Protocol

from router.answers import final_answer

__all__ = ["AgreementJudge", "Judge"]


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
