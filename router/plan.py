"""The plain data a routing plan and a cascade run are made of, shared by the policy, the cascade state
machine, the scorers, the gateway and the offline replay (so none of them imports another for types).

A plan is an ordered tuple of steps over tier indices (0 = cheapest; the last tier is the strong one).
Each step is a set of calls made together (two calls when answers are compared for agreement); a later
step is taken only when the cascade rejects the answers of the earlier one or its calls fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class EscalationReason(StrEnum):
    """Why a step's answers were not returned. Closed set: each value is a metric label."""

    LOW_CONFIDENCE = "low_confidence"  # token log-probabilities below the threshold
    DISAGREEMENT = "disagreement"  # cheap answers do not agree on the final answer
    SCORER_REJECT = "scorer_reject"  # the trained answer scorer rates the answer as likely wrong
    EMPTY_ANSWER = "empty_answer"  # every answer of the step was blank
    TIER_ERROR = "tier_error"  # every call of the step failed (timeouts, 5xx, no replica)
    SCHEMA_VIOLATION = "schema_violation"  # the answer does not conform to the request's JSON schema


@dataclass(frozen=True, slots=True)
class Call:
    tier: int
    sample: int = 0  # 0, 1, ...: independent samples of the same tier (agreement mode "samples")


@dataclass(frozen=True, slots=True)
class Step:
    calls: tuple[Call, ...]

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(c.tier for c in self.calls)


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    cascade: bool  # False: route only, every successful answer is accepted (later steps = failover)
    start_tier: int  # the tier the difficulty/risk rules asked for (before headroom/latency changes)
    notes: tuple[str, ...] = ()  # why the plan deviates from the plain difficulty choice, for logs/spans

    @property
    def first_tier(self) -> int:
        return self.steps[0].calls[0].tier


@dataclass(frozen=True, slots=True)
class Answer:
    """One call's result. `error` set means the call failed and `text` is meaningless."""

    call: Call
    text: str = ""
    logprobs: tuple[float, ...] | None = None  # per output token, natural log
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def total_cost(answers: Iterable[Answer]) -> float | None:
    """A request costs the sum of every call made; unknown when any call has no cost."""
    total = 0.0
    for a in answers:
        if a.cost_usd is None:
            return None
        total += a.cost_usd
    return total


def total_tokens(answers: Iterable[Answer]) -> tuple[int, int]:
    """(input, output) tokens over every call made: what the client's `usage` reports."""
    inp = out = 0
    for a in answers:
        inp += a.input_tokens
        out += a.output_tokens
    return inp, out
