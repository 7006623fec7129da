"""The cascade as a pure state machine: the gateway and the offline replay (`llmgw cascade eval`) both
drive it, so their decisions are identical by construction. No I/O, no clock, no randomness.

    cascade = Cascade.from_config(policy.cascade)          # scorers + thresholds, built once
    state, step = cascade.start(plan)
    while True:
        answers = <make step.calls, in parallel>            # the caller's I/O
        decision = cascade.judge(plan, state, prompt, answers)
        if isinstance(decision, Escalate):
            state, step = decision.state, decision.step     # count decision.reason
            continue
        break                                               # Accept (answer + tier) or Fail

Judging a step: failed calls are dropped; if none succeeded the cascade escalates with `tier_error`
(or fails on the last step). On the last step, or in a route-only plan, the first successful answer is
accepted. Otherwise every successful answer of the step is scored against the other successful
answers so far; an answer is acceptable when every scorer's score reaches its threshold. The
acceptable answer with the highest first-scorer score wins (ties: the later call, i.e. the pricier
tier). When none is acceptable the cascade escalates with the reason of the first scorer that
rejected the best candidate (`empty_answer` when every answer was blank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from router.config import Cascade as CascadeConfig
from router.plan import Answer, EscalationReason, Plan, Step
from router.scorers import SchemaConformance, Scorer, TrainedAnswerScorer, build_scorer


@dataclass(frozen=True, slots=True)
class CascadeState:
    step: int  # index into plan.steps of the step being made
    answers: tuple[Answer, ...] = ()  # every call made so far, failed ones included (they cost too)
    escalations: tuple[EscalationReason, ...] = ()


@dataclass(frozen=True, slots=True)
class Accept:
    answer: Answer
    score: float | None  # first scorer's score of the accepted answer; None when nothing was scored
    state: CascadeState

    @property
    def tier(self) -> int:
        return self.answer.call.tier

    @property
    def escalated(self) -> bool:
        return bool(self.state.escalations)


@dataclass(frozen=True, slots=True)
class Escalate:
    step: Step
    reason: EscalationReason
    score: float | None
    state: CascadeState


@dataclass(frozen=True, slots=True)
class Fail:
    """The last step's calls all failed: the request has no answer (the gateway returns the error)."""

    reason: EscalationReason
    state: CascadeState


Decision = Accept | Escalate | Fail


@dataclass(frozen=True, slots=True)
class Cascade:
    scorers: tuple[tuple[Scorer, float], ...]  # (scorer, accept threshold), all must accept

    @classmethod
    def from_config(cls, config: CascadeConfig | None, trained: TrainedAnswerScorer | None = None) -> Cascade:
        if config is None:
            return cls(scorers=())
        return cls(scorers=tuple((build_scorer(s, trained), s.accept_threshold) for s in config.scorers))

    @property
    def checks_schema(self) -> bool:
        """Whether a scorer judges conformance to the request's JSON schema (bound per request)."""
        return any(isinstance(s, SchemaConformance) for s, _ in self.scorers)

    def with_schema(self, conforms: Callable[[str], bool] | None) -> Cascade:
        """This cascade for one request: its schema scorers check `conforms` (None: accept all)."""
        if not self.checks_schema:
            return self
        bound = SchemaConformance(conforms)
        return Cascade(tuple((bound if isinstance(s, SchemaConformance) else s, t) for s, t in self.scorers))

    def start(self, plan: Plan) -> tuple[CascadeState, Step]:
        if not plan.steps:
            raise ValueError("a plan needs at least one step")
        return CascadeState(step=0), plan.steps[0]

    def judge(
        self,
        plan: Plan,
        state: CascadeState,
        prompt: str,
        answers: Sequence[Answer],
        threshold_offset: float = 0.0,
    ) -> Decision:
        """`threshold_offset` lowers every accept threshold (router/cost_guard.py's budget hook)."""
        step = plan.steps[state.step]
        if len(answers) != len(step.calls) or any(a.call not in step.calls for a in answers):
            raise ValueError(f"answers {[a.call for a in answers]} do not match step calls {step.calls}")
        made = CascadeState(state.step, state.answers + tuple(answers), state.escalations)
        last = state.step == len(plan.steps) - 1
        ok = [a for a in answers if a.ok]
        if not ok:
            if last:
                return Fail(EscalationReason.TIER_ERROR, made)
            return self._escalate(plan, made, EscalationReason.TIER_ERROR, None)
        if not plan.cascade or not self.scorers:
            return Accept(ok[0], None, made)

        earlier = [a for a in state.answers if a.ok]
        best: tuple[float, int] | None = None  # (first score, position) of the best acceptable answer
        fallback: tuple[float, int, EscalationReason] | None = None  # best rejected: for the reason
        for pos, answer in enumerate(ok):
            if not answer.text.strip():
                cand = (0.0, pos, EscalationReason.EMPTY_ANSWER)
                fallback = cand if fallback is None or cand[:2] >= fallback[:2] else fallback
                continue
            others = earlier + [o for o in ok if o is not answer]
            scores = [s.score(prompt, answer, others) for s, _ in self.scorers]
            rejected = next(
                (
                    s.reject_reason
                    for (s, t), v in zip(self.scorers, scores, strict=True)
                    if v < t - threshold_offset
                ),
                None,
            )
            if rejected is None:
                if best is None or (scores[0], pos) >= best:
                    best = (scores[0], pos)
            else:
                cand = (scores[0], pos, rejected)
                # Prefer a scored rejection over a blank answer for the reported reason.
                if (
                    fallback is None
                    or fallback[2] is EscalationReason.EMPTY_ANSWER
                    or cand[:2] >= fallback[:2]
                ):
                    fallback = cand
        if best is not None:
            return Accept(ok[best[1]], best[0], made)
        assert fallback is not None
        if last:
            # The strongest tier's answer is final even when a scorer would not vouch for it.
            return Accept(ok[fallback[1]], fallback[0], made)
        return self._escalate(plan, made, fallback[2], fallback[0])

    @staticmethod
    def _escalate(plan: Plan, made: CascadeState, reason: EscalationReason, score: float | None) -> Escalate:
        nxt = made.step + 1
        state = CascadeState(nxt, made.answers, made.escalations + (reason,))
        return Escalate(plan.steps[nxt], reason, score, state)
