"""Training a step scorer on synthetic routing rows, and the replay's score cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from eval.routing.cascade_eval import cross_validate, memoized
from eval.routing.data import Outcome, Row
from eval.routing.scorer_train import step_examples, train_step_scorer
from router.cascade import Cascade
from router.config import RoutingPolicy
from router.plan import Answer, Call, EscalationReason

MODELS = ["cheap-a", "cheap-b", "strong"]
POLICY = RoutingPolicy.model_validate(
    {
        "tiers": [{"pool": "a"}, {"pool": "b"}, {"pool": "s"}],
        "cascade": {
            "scorers": [
                {"kind": "trained", "accept_threshold": 0.5},
                {"kind": "agreement", "mode": "tiers", "accept_threshold": 0.0},
            ]
        },
    }
)


def _rows(n: int) -> list[Row]:
    """Choice questions where the two cheap models are right exactly when they agree, and their
    answers are otherwise indistinguishable bare letters: only the context can tell."""
    rows = []
    for i in range(n):
        prompt = f"Question {i}?\nA) one\nB) two\nC) three\nAnswer:"
        agree = i % 3 != 0
        a, b = ("B", "B") if agree else ("A", "C")
        rows.append(
            Row(
                id=f"r{i}",
                source="t",
                task="t",
                prompt=prompt,
                outcomes={
                    "cheap-a": Outcome(1.0 if agree else 0.0, 1.0, a),
                    "cheap-b": Outcome(1.0 if agree else 0.0, 1.0, b),
                    "strong": Outcome(1.0, 10.0, "B"),
                },
            )
        )
    return rows


def test_step_examples_give_each_cheap_answer_its_context() -> None:
    ex = step_examples(_rows(6), POLICY, MODELS)
    assert ex.n == 12  # two cheap answers per row; the strong tier's answer is never scored
    assert set(ex.labels.tolist()) == {0.0, 1.0}


def test_a_trained_step_scorer_learns_that_agreement_means_right() -> None:
    rows = _rows(60)
    scorer = train_step_scorer(rows, POLICY, MODELS)
    q = rows[0].prompt
    agreed = scorer.score(q, Answer(Call(1), "B"), [Answer(Call(0), "B")])
    split = scorer.score(q, Answer(Call(1), "C"), [Answer(Call(0), "A")])
    assert agreed > 0.8 > 0.3 > split


def test_cross_validation_with_step_scorers_escalates_the_disagreements() -> None:
    rows = _rows(60)
    pools = {"a": "cheap-a", "b": "cheap-b", "s": "strong"}
    result = cross_validate(rows, POLICY, pools, k=3, target_cost_share=0.6, step_scorer=True, inner_folds=2)
    by_id = {d.id: d for d in result.decisions}
    assert len(by_id) == len(rows)
    for i, row in enumerate(rows):
        # Disagreeing rows go to the strong tier; agreeing ones are answered cheaply.
        assert (by_id[row.id].pool == "s") == (i % 3 == 0)
    assert all(d.quality == 1.0 for d in result.decisions)


@dataclass
class _TierScorer:
    """Scores by the answering tier; counts its calls."""

    calls: list[int] = field(default_factory=list)
    reject_reason: EscalationReason = EscalationReason.SCORER_REJECT

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        self.calls.append(answer.call.tier)
        return 0.9 if answer.call.tier == 1 else 0.1


def test_replay_cache_keys_on_the_tier_not_only_the_text() -> None:
    inner = _TierScorer()
    scorer = memoized(Cascade(scorers=((inner, 0.5),))).scorers[0][0]
    a0, a1 = Answer(Call(0), "B"), Answer(Call(1), "B")
    assert scorer.score("q", a0, [a1]) == 0.1
    assert scorer.score("q", a1, [a0]) == 0.9
    assert scorer.score("q", a1, [a0]) == 0.9
    assert inner.calls == [0, 1]
