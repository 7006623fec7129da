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
- SchemaConformance: whether the answer conforms to the request's `response_format` JSON schema (1 or
  0); bound per request, since the schema is the request's (`Cascade.with_schema`).
- TrainedAnswerScorer: logistic regression over router/answer_features.py, weights from a small JSON
  artifact (trained by eval/routing/scorer_train.py; the shipped ones are in router/scorer_artifacts/).
  Format 1 scores the answer alone. Format 2 (a *step* scorer) adds weights over the answer's context:
  which tier gave it and how the other answers of the request so far relate to it (agreement pattern,
  chosen options, similarity); it is trained for one alias's tier list, recorded in its `meta.tiers`.
  Both load through `TrainedAnswerScorer.load`, so the gateway needs no change to run either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from router.answer_features import CONTEXT_BUCKETS, N_FEATURES, context_features, features
from router.answers import final_answer
from router.config import AgreementScorer, LogprobScorer, SchemaScorer, ScorerConfig, TrainedScorer
from router.plan import Answer, EscalationReason

ARTIFACT_FORMAT = "llmgw-answer-scorer/1"
STEP_ARTIFACT_FORMAT = "llmgw-answer-scorer/2"
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


@dataclass(frozen=True, slots=True)
class SchemaConformance:
    """1 when the answer conforms to the request's JSON schema, else 0. `conforms` is the request's
    check (the gateway builds it with jsonschema: gateway/guardrails/conformance.py); None (the request
    asked for no schema, or the scorer is not bound yet) accepts every answer."""

    conforms: Callable[[str], bool] | None = None
    reject_reason: EscalationReason = EscalationReason.SCHEMA_VIOLATION

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        return 1.0 if self.conforms is None or self.conforms(answer.text) else 0.0


class ScorerArtifactError(ValueError):
    """A missing or corrupt answer-scorer artifact; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class TrainedAnswerScorer:
    weights: tuple[float, ...]
    # Empty: an answer-only scorer (format 1). Else CONTEXT_BUCKETS weights over context_features.
    context_weights: tuple[float, ...] = ()
    reject_reason: EscalationReason = EscalationReason.SCORER_REJECT

    @property
    def uses_context(self) -> bool:
        return bool(self.context_weights)

    def probability(self, prompt: str, text: str) -> float:
        return _sigmoid(self._answer_z(prompt, text))

    def _answer_z(self, prompt: str, text: str) -> float:
        return sum(self.weights[i] * v for i, v in features(prompt, text).items())

    def score(self, prompt: str, answer: Answer, others: Sequence[Answer]) -> float:
        z = self._answer_z(prompt, answer.text)
        if self.context_weights:
            ctx = [(o.call.tier, o.text) for o in others]
            cf = context_features(prompt, answer.text, answer.call.tier, ctx)
            z += sum(self.context_weights[i - N_FEATURES] * v for i, v in cf.items())
        return _sigmoid(z)

    def to_json(self, meta: dict[str, Any] | None = None) -> str:
        fmt = STEP_ARTIFACT_FORMAT if self.context_weights else ARTIFACT_FORMAT
        body: dict[str, Any] = {"format": fmt, "n_features": N_FEATURES, "meta": meta or {}}
        body["weights"] = [round(w, 5) for w in self.weights]
        if self.context_weights:
            body["context_weights"] = [round(w, 5) for w in self.context_weights]
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, source: str) -> TrainedAnswerScorer:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScorerArtifactError(f"{source}: not JSON ({exc})") from exc
        formats = (ARTIFACT_FORMAT, STEP_ARTIFACT_FORMAT)
        if not isinstance(body, dict) or body.get("format") not in formats:
            raise ScorerArtifactError(
                f"{source}: not an answer-scorer artifact (format {' or '.join(formats)})"
            )
        weights = _weights(body.get("weights"), N_FEATURES, "weights", source)
        context: tuple[float, ...] = ()
        if body["format"] == STEP_ARTIFACT_FORMAT:
            context = _weights(body.get("context_weights"), CONTEXT_BUCKETS, "context_weights", source)
        return cls(weights=weights, context_weights=context)

    @classmethod
    def load(cls, path: str | Path | None = None) -> TrainedAnswerScorer:
        """From `path`, or the artifact shipped in router/scorer_artifacts/ when None. A bare file name
        that is not a file in the working directory names a shipped artifact (`step_scorer_auto.json`)."""
        name = str(path) if path is not None else SHIPPED_ARTIFACT
        if path is None or ("/" not in name and not Path(name).exists()):
            ref = resources.files("router.scorer_artifacts") / name
            source = f"router/scorer_artifacts/{name}"
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


def _sigmoid(z: float) -> float:
    # Clamp: exp overflows beyond ~709 and a corrupt weight must not crash a request.
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


def _weights(raw: object, n: int, key: str, source: str) -> tuple[float, ...]:
    if (
        not isinstance(raw, list)
        or len(raw) != n
        or not all(isinstance(w, int | float) and math.isfinite(w) for w in raw)
    ):
        raise ScorerArtifactError(f"{source}: {key} must be {n} finite numbers (features changed? retrain)")
    return tuple(float(w) for w in raw)


def build_scorer(config: ScorerConfig, trained: TrainedAnswerScorer | None = None) -> Scorer:
    """The scorer a config names; `trained` replaces the artifact (cross-validation, tests)."""
    if isinstance(config, LogprobScorer):
        return LogprobConfidence(reduce=config.reduce)
    if isinstance(config, AgreementScorer):
        return Agreement()
    if isinstance(config, TrainedScorer):
        return trained if trained is not None else TrainedAnswerScorer.load(config.artifact)
    if isinstance(config, SchemaScorer):
        return SchemaConformance()
    raise TypeError(f"unknown scorer config {config!r}")
