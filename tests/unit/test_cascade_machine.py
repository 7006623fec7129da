from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from router.cascade import Accept, Cascade, Escalate, Fail
from router.config import RoutingPolicy
from router.plan import Answer, Call, EscalationReason, Plan, Step, total_cost, total_tokens
from router.policy import plan_route
from router.scorers import Agreement

Q = "Pick one.\nA) red\nB) blue\nC) green\nAnswer:"


@dataclass(frozen=True)
class FixedScore:
    """Scores an answer by a table of its text; rejects as scorer_reject."""

    table: dict[str, float]
    reject_reason: EscalationReason = EscalationReason.SCORER_REJECT

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        return self.table.get(answer.text, 0.0)


def _plan(*steps: tuple[int, ...], cascade: bool = True) -> Plan:
    return Plan(steps=tuple(Step(tuple(Call(t) for t in s)) for s in steps), cascade=cascade, start_tier=0)


def _ans(tier: int, text: str, cost: float = 1.0, error: str | None = None) -> Answer:
    return Answer(Call(tier), text=text, cost_usd=cost, error=error, input_tokens=10, output_tokens=2)


def test_agreeing_cheap_tiers_are_accepted_without_escalation() -> None:
    cascade = Cascade(scorers=((Agreement(), 0.5),))
    plan = _plan((0, 1), (2,))
    state, step = cascade.start(plan)
    assert step.tiers == (0, 1)
    d = cascade.judge(plan, state, Q, [_ans(0, "B"), _ans(1, "B) blue")])
    assert isinstance(d, Accept)
    # Equal scores: the later call (the pricier tier) answers.
    assert d.tier == 1 and d.score == 1.0 and not d.escalated


def test_disagreement_escalates_to_the_strong_tier_which_is_final() -> None:
    cascade = Cascade(scorers=((Agreement(), 0.5),))
    plan = _plan((0, 1), (2,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, Q, [_ans(0, "A"), _ans(1, "B")])
    assert isinstance(d, Escalate)
    assert d.reason is EscalationReason.DISAGREEMENT and d.step.tiers == (2,)
    final = cascade.judge(plan, d.state, Q, [_ans(2, "C", cost=10.0)])
    assert isinstance(final, Accept) and final.tier == 2 and final.escalated
    assert final.state.escalations == (EscalationReason.DISAGREEMENT,)
    # Usage and cost of the request are the sum over all three calls.
    assert total_cost(final.state.answers) == 12.0
    assert total_tokens(final.state.answers) == (30, 6)


def test_a_third_tier_is_judged_against_earlier_answers() -> None:
    cascade = Cascade(scorers=((Agreement(), 0.5),))
    plan = _plan((0, 1), (2,), (3,))
    state, _ = cascade.start(plan)
    d1 = cascade.judge(plan, state, Q, [_ans(0, "A"), _ans(1, "B")])
    assert isinstance(d1, Escalate)
    d2 = cascade.judge(plan, d1.state, Q, [_ans(2, "B")])  # agrees with one of two: 0.5
    assert isinstance(d2, Accept) and d2.tier == 2 and d2.score == 0.5


def test_all_scorers_must_accept_and_the_first_rejecting_names_the_reason() -> None:
    cascade = Cascade(scorers=((Agreement(), 0.5), (FixedScore({"B": 0.2}), 0.5)))
    plan = _plan((0, 1), (2,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, Q, [_ans(0, "B"), _ans(1, "B")])
    assert isinstance(d, Escalate) and d.reason is EscalationReason.SCORER_REJECT


def test_best_acceptable_answer_wins_within_a_step() -> None:
    cascade = Cascade(scorers=((FixedScore({"x": 0.6, "y": 0.9}), 0.5),))
    plan = _plan((0, 1), (2,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, "q", [_ans(0, "y"), _ans(1, "x")])
    assert isinstance(d, Accept) and d.tier == 0 and d.score == 0.9


def test_failed_calls_escalate_with_tier_error_and_the_last_step_can_fail() -> None:
    cascade = Cascade(scorers=((FixedScore({"x": 1.0}), 0.5),))
    plan = _plan((0,), (1,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, "q", [_ans(0, "", error="timeout")])
    assert isinstance(d, Escalate) and d.reason is EscalationReason.TIER_ERROR
    f = cascade.judge(plan, d.state, "q", [_ans(1, "", error="503")])
    assert isinstance(f, Fail) and len(f.state.answers) == 2


def test_blank_answers_escalate_as_empty() -> None:
    cascade = Cascade(scorers=((FixedScore({}), 0.0),))
    plan = _plan((0,), (1,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, "q", [_ans(0, "  ")])
    assert isinstance(d, Escalate) and d.reason is EscalationReason.EMPTY_ANSWER


def test_last_step_answer_is_accepted_even_when_rejected() -> None:
    cascade = Cascade(scorers=((FixedScore({}), 0.9),))
    plan = _plan((0,))
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, "q", [_ans(0, "anything")])
    assert isinstance(d, Accept) and d.score == 0.0


def test_route_only_plan_accepts_the_first_success_unscored() -> None:
    cascade = Cascade(scorers=((FixedScore({}), 0.9),))
    plan = _plan((0,), (1,), cascade=False)
    state, _ = cascade.start(plan)
    d = cascade.judge(plan, state, "q", [_ans(0, "x")])
    assert isinstance(d, Accept) and d.tier == 0 and d.score is None


def test_answers_must_match_the_step() -> None:
    cascade = Cascade(scorers=())
    plan = _plan((0,), (1,))
    state, _ = cascade.start(plan)
    with pytest.raises(ValueError, match="do not match"):
        cascade.judge(plan, state, "q", [_ans(1, "x")])


def test_from_config_drives_a_policy_plan_end_to_end() -> None:
    policy = RoutingPolicy.model_validate(
        {
            "tiers": [{"pool": "m"}, {"pool": "y"}, {"pool": "g"}],
            "cascade": {"scorers": [{"kind": "agreement", "accept_threshold": 1.0}]},
        }
    )
    cascade = Cascade.from_config(policy.cascade)
    plan = plan_route(policy, None)
    state, step = cascade.start(plan)
    answers = {0: "C", 1: "A", 2: "B"}
    while True:
        d = cascade.judge(plan, state, Q, [_ans(c.tier, answers[c.tier]) for c in step.calls])
        if not isinstance(d, Escalate):
            break
        state, step = d.state, d.step
    assert isinstance(d, Accept) and d.tier == 2
    assert [a.call.tier for a in d.state.answers] == [0, 1, 2]


def test_threshold_offset_lowers_every_accept_bar() -> None:
    cascade = Cascade(scorers=((FixedScore({"A": 0.6}), 0.7),))
    plan = _plan((0,), (1,))
    state, _ = cascade.start(plan)
    assert isinstance(cascade.judge(plan, state, Q, [_ans(0, "A")]), Escalate)
    assert isinstance(cascade.judge(plan, state, Q, [_ans(0, "A")], threshold_offset=0.1), Accept)
    assert isinstance(cascade.judge(plan, state, Q, [_ans(0, "A")], threshold_offset=0.05), Escalate)
