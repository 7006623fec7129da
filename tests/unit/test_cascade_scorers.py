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


def _step_scorer(token: str, weight: float) -> TrainedAnswerScorer:
    """A step scorer with one non-zero context weight, on the bucket of `token`."""
    import zlib

    from router.answer_features import CONTEXT_BUCKETS

    cw = [0.0] * CONTEXT_BUCKETS
    cw[zlib.crc32(token.encode()) % CONTEXT_BUCKETS] = weight
    return TrainedAnswerScorer(weights=(0.0,) * N_FEATURES, context_weights=tuple(cw))


def _at(tier: int, text: str) -> Answer:
    return Answer(Call(tier), text=text)


def test_context_features_live_in_their_own_block_and_see_the_other_answers() -> None:
    from router.answer_features import CONTEXT_BUCKETS, context_features

    agree = context_features(Q, "A", 1, [(0, "A) red")])
    disagree = context_features(Q, "A", 1, [(0, "B")])
    assert all(N_FEATURES <= i < N_FEATURES + CONTEXT_BUCKETS for i in agree)
    assert agree == context_features(Q, "A", 1, [(0, "A) red")])
    assert agree != disagree
    # The tier that answered is part of the context: a step scorer is trained for one tier list.
    assert context_features(Q, "A", 0, [(1, "A")]) != context_features(Q, "A", 1, [(0, "A")])


def test_step_scorer_scores_an_answer_by_what_the_other_answers_say() -> None:
    s = _step_scorer("c:tier:1|n:1|agree:1", 3.0)
    assert s.uses_context
    agreed = s.score(Q, _at(1, "A"), [_at(0, "A) red")])
    assert agreed > 0.95
    assert s.score(Q, _at(1, "A"), [_at(0, "B")]) == 0.5
    assert s.score(Q, _at(0, "A"), [_at(1, "A")]) == 0.5  # same texts, other tier: not the trained context
    # Format 1 ignores the context entirely.
    plain = _scorer_with("bias", 0.0)
    assert not plain.uses_context
    assert plain.score(Q, _at(1, "A"), [_at(0, "A")]) == plain.score(Q, _at(1, "A"), [])


def test_step_artifact_round_trip_and_corrupt_context(tmp_path: Path) -> None:
    s = _step_scorer("c:bias|choice", -1.5)
    path = tmp_path / "step.json"
    path.write_text(s.to_json({"tiers": ["a", "b", "c"]}))
    assert json.loads(path.read_text())["format"] == "llmgw-answer-scorer/2"
    loaded = TrainedAnswerScorer.load(path)
    assert loaded.context_weights == s.context_weights and loaded.weights == s.weights
    body = json.loads(path.read_text())
    body["context_weights"] = body["context_weights"][:-1]
    path.write_text(json.dumps(body))
    with pytest.raises(ScorerArtifactError, match="context_weights must be"):
        TrainedAnswerScorer.load(path)
    body["format"] = "llmgw-answer-scorer/9"
    path.write_text(json.dumps(body))
    with pytest.raises(ScorerArtifactError, match="not an answer-scorer artifact"):
        TrainedAnswerScorer.load(path)


def test_a_bare_artifact_name_is_a_shipped_one() -> None:
    assert TrainedAnswerScorer.load("answer_scorer.json").weights == TrainedAnswerScorer.load().weights
    with pytest.raises(ScorerArtifactError, match="router/scorer_artifacts/nope.json: cannot read"):
        TrainedAnswerScorer.load("nope.json")
