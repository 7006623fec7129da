from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from router.answer_features import DENSE, HASH_BUCKETS, N_FEATURES, features
from router.config import AgreementScorer, LogprobScorer, TrainedScorer
from router.plan import Answer, Call, EscalationReason
from router.scorers import (
    Agreement,
    LogprobConfidence,
    ScorerArtifactError,
    TrainedAnswerScorer,
    build_scorer,
)

Q = "Pick one.\nA) red\nB) blue\nAnswer:"


def _a(text: str, logprobs: tuple[float, ...] | None = None) -> Answer:
    return Answer(Call(0), text=text, logprobs=logprobs)


def test_logprob_confidence_mean_and_min() -> None:
    lp = (math.log(0.9), math.log(0.5))
    assert LogprobConfidence("mean").score(Q, _a("A", lp), []) == pytest.approx(math.sqrt(0.45))
    assert LogprobConfidence("min").score(Q, _a("A", lp), []) == pytest.approx(0.5)
    # No logprobs: cannot vouch for the answer.
    assert LogprobConfidence().score(Q, _a("A"), []) == 0.0
    assert LogprobConfidence().reject_reason is EscalationReason.LOW_CONFIDENCE


def test_agreement_is_the_share_of_agreeing_others() -> None:
    s = Agreement()
    assert s.score(Q, _a("A"), [_a("A) red"), _a("B")]) == 0.5
    assert s.score(Q, _a("B"), [_a("blue")]) == 1.0
    assert s.score(Q, _a("A"), []) == 0.0


def _scorer_with(name: str, weight: float) -> TrainedAnswerScorer:
    w = [0.0] * N_FEATURES
    w[HASH_BUCKETS + DENSE.index(name)] = weight
    return TrainedAnswerScorer(weights=tuple(w))


def test_trained_scorer_uses_its_weights() -> None:
    s = _scorer_with("refusal", -5.0)
    assert s.score(Q, _a("I'm sorry, I cannot answer that."), []) < 0.01
    assert s.score(Q, _a("A"), []) == 0.5  # no refusal: z = 0
    assert s.reject_reason is EscalationReason.SCORER_REJECT


def test_features_are_deterministic_and_bounded() -> None:
    f1 = features(Q, "The answer is A because red.")
    assert f1 == features(Q, "The answer is A because red.")
    assert all(0 <= i < N_FEATURES for i in f1)
    assert f1[HASH_BUCKETS + DENSE.index("bias")] == 1.0
    assert features(Q, "x" * 100_000)  # bounded work on huge answers, no exception


def test_artifact_round_trip_and_corrupt_files(tmp_path: Path) -> None:
    s = _scorer_with("has_def", 1.25)
    path = tmp_path / "s.json"
    path.write_text(s.to_json({"note": "test"}))
    assert TrainedAnswerScorer.load(path).weights == s.weights
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScorerArtifactError, match="not JSON"):
        TrainedAnswerScorer.load(bad)
    body = json.loads(path.read_text())
    body["weights"] = body["weights"][:10]
    bad.write_text(json.dumps(body))
    with pytest.raises(ScorerArtifactError, match="finite numbers"):
        TrainedAnswerScorer.load(bad)
    with pytest.raises(ScorerArtifactError, match="cannot read"):
        TrainedAnswerScorer.load(tmp_path / "missing.json")


def test_shipped_artifact_loads_and_prefers_python_code_for_a_python_task() -> None:
    s = TrainedAnswerScorer.load()
    prompt = "Write a python function to find the intersection of two arrays."
    good = "```python\ndef intersection(a, b):\n    return list(set(a) & set(b))\n```"
    bad = "I'm sorry, I cannot help with that."
    assert s.score(prompt, _a(good), []) > s.score(prompt, _a(bad), [])


def test_build_scorer_follows_the_config() -> None:
    assert isinstance(build_scorer(LogprobScorer(kind="logprob")), LogprobConfidence)
    assert isinstance(build_scorer(AgreementScorer(kind="agreement")), Agreement)
    custom = _scorer_with("bias", 1.0)
    assert build_scorer(TrainedScorer(kind="trained"), custom) is custom
