"""Answer scorers: how confident the cascade may be that a cheap answer is good enough.

One protocol: `score(prompt, answer, others) -> float in [0, 1]` (higher = more likely good) plus the
escalation reason a rejection is counted under. `others` are the other successful answers of the same
request so far (same step and earlier steps); only the agreement scorer looks at them. Scorers are
pure and deterministic given their inputs, so the offline replay and the gateway score identically.

- LogprobConfidence: exp(mean or min token log-probability) of the answer. An answer without
  logprobs scores 0 (escalates): a pool configured for this scorer must return them, and silently
  accepting unscored answers would hide that misconfiguration.
- Agreement: the share of the other answers with the same normalized final answer (router/answers.py).
  With nothing to compare against it scores 0.
- TrainedAnswerScorer: logistic regression over router/answer_features.py, weights from a small JSON
  artifact (trained by eval/routing/scorer_train.py; the shipped one is router/scorer_artifacts/).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from router.answer_features import N_FEATURES, features
from router.answers import final_answer
from router.config import AgreementScorer, LogprobScorer, ScorerConfig, TrainedScorer
from router.plan import Answer, EscalationReason

ARTIFACT_FORMAT = "llmgw-answer-scorer/1"
SHIPPED_ARTIFACT = "answer_scorer.json"


class Scorer(Protocol):
    @property
    def reject_reason(self) -> EscalationReason: ...

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float: ...


@dataclass(frozen=True, slots=True)
class LogprobConfidence:
    reduce: str = "mean"
    reject_reason: EscalationReason = EscalationReason.LOW_CONFIDENCE

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        lp = answer.logprobs
        if not lp:
            return 0.0
        value = min(lp) if self.reduce == "min" else sum(lp) / len(lp)
        return math.exp(min(value, 0.0))


@dataclass(frozen=True, slots=True)
class Agreement:
    reject_reason: EscalationReason = EscalationReason.DISAGREEMENT

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        if not others:
            return 0.0
        mine = final_answer(prompt, answer.text)
        same = sum(1 for o in others if mine.agrees(final_answer(prompt, o.text)))
        return same / len(others)


class ScorerArtifactError(ValueError):
    """A missing or corrupt answer-scorer artifact; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class TrainedAnswerScorer:
    weights: tuple[float, ...]
    reject_reason: EscalationReason = EscalationReason.SCORER_REJECT

    def probability(self, prompt: str, text: str) -> float:
        z = sum(self.weights[i] * v for i, v in features(prompt, text).items())
        # Clamp: exp overflows beyond ~709 and a corrupt weight must not crash a request.
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        return self.probability(prompt, answer.text)

    def to_json(self, meta: dict[str, Any] | None = None) -> str:
        body = {"format": ARTIFACT_FORMAT, "n_features": N_FEATURES, "meta": meta or {}}
        body["weights"] = [round(w, 5) for w in self.weights]
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, source: str) -> TrainedAnswerScorer:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScorerArtifactError(f"{source}: not JSON ({exc})") from exc
        if not isinstance(body, dict) or body.get("format") != ARTIFACT_FORMAT:
            raise ScorerArtifactError(f"{source}: not an answer-scorer artifact (format {ARTIFACT_FORMAT})")
        weights = body.get("weights")
        if (
            not isinstance(weights, list)
            or len(weights) != N_FEATURES
            or not all(isinstance(w, int | float) and math.isfinite(w) for w in weights)
        ):
            raise ScorerArtifactError(
                f"{source}: weights must be {N_FEATURES} finite numbers (features changed? retrain)"
            )
        return cls(weights=tuple(float(w) for w in weights))

    @classmethod
    def load(cls, path: str | Path | None = None) -> TrainedAnswerScorer:
        """From `path`, or the artifact shipped in router/scorer_artifacts/ when None."""
        if path is None:
            ref = resources.files("router.scorer_artifacts") / SHIPPED_ARTIFACT
            source = f"router/scorer_artifacts/{SHIPPED_ARTIFACT}"
            try:
                text = ref.read_text(encoding="utf-8")
            except OSError as exc:
                raise ScorerArtifactError(f"{source}: cannot read ({exc})") from exc
        else:
            source = str(path)
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ScorerArtifactError(f"{source}: cannot read ({exc.strerror})") from exc
        return cls.from_json(text, source)


def build_scorer(config: ScorerConfig, trained: TrainedAnswerScorer | None = None) -> Scorer:
    """The scorer a config names; `trained` replaces the artifact (cross-validation, tests)."""
    if isinstance(config, LogprobScorer):
        return LogprobConfidence(reduce=config.reduce)
    if isinstance(config, AgreementScorer):
        return Agreement()
    if isinstance(config, TrainedScorer):
        return trained if trained is not None else TrainedAnswerScorer.load(config.artifact)
    raise TypeError(f"unknown scorer config {config!r}")
