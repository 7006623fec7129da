"""Routed aliases: a model whose route is a routing policy (`model: auto`), on the gateway's side.

Per request: the text that distinguishes it (the last user turn) -> difficulty from the router model
(off the event loop) -> `router.policy.plan_route` (pure) -> either route only (the first tier's pool
serves the request like any alias, streams included) or the cascade: `router.cascade.Cascade` (pure)
judges each step's answers and the gateway makes the calls. The offline replay (`llmgw cascade eval`)
drives the same two functions with recorded answers, so the tiers chosen here and there agree.

What the client sees from a cascade: the accepted answer's body, `usage` summed over every call made
(tokens are what the tenant's budgets are charged), and headers naming the tier that answered
(`x-llmgw-tier`), the escalations (`x-llmgw-escalations`, reasons in `llmgw_router_escalations`) and
the difficulty. A streamed request under `stream_mode: buffer` gets the accepted answer as SSE once it
is accepted.

Start-up (`build_routed`): a policy with a `difficulty` section needs the router model. When the
artifact is missing or corrupt the gateway refuses to start with the reason, unless the policy says
`on_unavailable: fallback`; then every request starts at `fallback_tier`, a warning is logged and
`llmgw_router_fallback{model}` is 1, so it is never silent.

A policy with a `success` section (the N-tier policy, router/tiers.py) loads the success predictor
instead, served on a difficulty model's inference thread (router.difficulty.SuccessScorer; the first
one loaded, else the shipped one): every tier's `like` must name a model of the predictor (else the
gateway refuses to start, whatever `on_unavailable` says: that is a mistake in the file), and the tiers'
prices, pools' included, must be ordered cheap -> strong ("the cheapest tier within tolerance" is the
first). Per request the start tier comes from the per-tier probabilities; the header carries
1 - p(cheapest tier) as the difficulty; the probabilities go to the routing span and the request log.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway.config import ConfigError, Policy
from router.artifact_error import RouterArtifactError
from router.cascade import Cascade
from router.config import LogprobScorer, RoutingPolicy, TrainedScorer
from router.plan import Answer, Call, Plan, total_tokens
from router.policy import plan_route, resolve_thresholds
from router.scorers import ScorerArtifactError, TrainedAnswerScorer
from router.text import request_text
from router.tiers import header_difficulty, strong_gap, tier_columns, tier_probabilities

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from gateway.routing.learning import Learning
    from router.calibration import LiveCalibration
    from router.cost_guard import CostGuard
    from router.difficulty import DifficultyModel, SuccessScorer


@dataclass(frozen=True, slots=True)
class Planned:
    """A routed request's plan and what it was planned from."""

    plan: Plan
    difficulty: float | None
    prompt: str  # the text the cascade's scorers and the judges see (the last user turn)
    embedding: npt.NDArray[np.float32] | None  # the prompt's embedding, with an outcome memory only
    # A success policy's per-tier predicted success (cheap -> strong) and the tolerance it used.
    success: tuple[float, ...] | None = None
    tolerance: float | None = None


@dataclass(frozen=True, slots=True)
class RoutedAlias:
    name: str
    policy: RoutingPolicy  # tiers carry prices (from the pools unless overridden)
    pools: tuple[str, ...]  # tier index -> pool name
    thresholds: tuple[float, ...] | None
    cascade: Cascade
    difficulty: DifficultyModel | None
    fallback: str | None  # why requests start at the fallback tier without a model; None: they do not
    logprobs: bool  # a scorer needs token log-probabilities: ask the pools for them
    # The target_strong_share cut learnt from this replica's traffic (None: fixed cut points).
    calibration: LiveCalibration | None = None
    # Keeps the cascade's realized cost under `cascade.cost_budget` (None: no budget).
    guard: CostGuard | None = None
    # The outcome memory and exploration (gateway.routing.learning; bound by the route table).
    learning: Learning | None = None
    # The success policy: its predictor on the model thread, and each tier's column in its output.
    # With `success` in the policy, `calibration` learns the tolerance (router/tiers.py).
    success: SuccessScorer | None = None
    columns: tuple[int, ...] = ()

    def settle_cost(self, answers: Sequence[Answer], accepted: Answer, escalated: bool) -> None:
        """Feed the cost guard one finished cascade: what its calls cost against what the strong tier
        alone would have cost on the accepted answer's tokens (skipped when prices are unknown)."""
        strong = self.policy.tiers[-1].price
        if self.guard is None or strong is None or any(a.cost_usd is None for a in answers if a.ok):
            return
        spent = sum(a.cost_usd or 0.0 for a in answers if a.ok)
        try:
            self.guard.record(spent, strong.cost(accepted.input_tokens, accepted.output_tokens), escalated)
        except ValueError:  # a cost the guard refuses (NaN, negative): the answer stands, unrecorded
            pass

    async def plan(
        self,
        messages: Any,
        latency_budget_ms: float | None,
        risk: Sequence[str],
        streaming: bool,
        allowed: frozenset[int] | None = None,
        org: str = "",
    ) -> Planned:
        """The plan; `allowed`: the tiers the caller's key may use (None: all; never empty); `org`: the
        caller's, whose own ratings the memory blends in (gateway.routing.learning)."""
        text = request_text(messages if isinstance(messages, list) else [])
        if self.policy.success is not None:
            return await self._plan_success(text, latency_budget_ms, risk, streaming, allowed)
        model, learning = self.difficulty, self.learning
        difficulty: float | None = None
        embedding = None
        if model is not None:
            if learning is not None and learning.memory is not None:
                prior, embedding = await model.assess(text)
                difficulty = learning.difficulty(prior, embedding, org)
            else:
                difficulty = await model.score(text)
        thresholds = self.thresholds
        cal = self.calibration
        if cal is not None and difficulty is not None:
            cut = cal.cut()  # None until enough live scores: the artifact's cut meanwhile
            if cut is not None:
                thresholds = (cut,) * (len(self.pools) - 1)
            cal.observe(difficulty)
        plan = plan_route(
            self.policy,
            difficulty,
            thresholds=thresholds,
            latency_budget_ms=latency_budget_ms,
            risk_flags=risk,
            streaming=streaming,
            allowed_tiers=allowed,
        )
        return Planned(plan, difficulty, text, embedding)

    async def _plan_success(
        self,
        text: str,
        latency_budget_ms: float | None,
        risk: Sequence[str],
        streaming: bool,
        allowed: frozenset[int] | None,
    ) -> Planned:
        """The N-tier policy: per-tier probabilities (off the loop), the tolerance (live when learnt)."""
        assert self.policy.success is not None
        probs: tuple[float, ...] | None = None
        if self.success is not None:
            row, _ = await self.success.assess(text)
            probs = tier_probabilities(row, self.columns)
        tolerance = self.policy.success.tolerance
        cal = self.calibration
        if cal is not None and probs is not None:
            cut = cal.cut()  # None until enough live gaps: the configured tolerance meanwhile
            if cut is not None:
                # The sketch's value can fall a relative 1 % outside [0, 1]; a negative tolerance would
                # let no tier qualify.
                tolerance = min(1.0, max(0.0, cut))
            cal.observe(strong_gap(probs))
        difficulty = header_difficulty(probs) if probs is not None else None
        plan = plan_route(
            self.policy,
            difficulty,
            latency_budget_ms=latency_budget_ms,
            risk_flags=risk,
            streaming=streaming,
            allowed_tiers=allowed,
            success=probs,
            tolerance=tolerance,
        )
        return Planned(plan, difficulty, text, None, probs, tolerance if probs is not None else None)


def _equal_share_cuts(model: DifficultyModel, tiers: int) -> tuple[float, ...]:
    """Default calibration: N tiers share the traffic equally (cut points at quantiles k/N)."""
    return tuple(_quantile(model, k / tiers) for k in range(1, tiers))


def _quantile(model: DifficultyModel, q: float) -> float:
    """Difficulty below which a share q of the calibration traffic falls, interpolated from the
    artifact's (strong share -> threshold) table: strong share s means quantile 1 - s."""
    points = sorted((1.0 - share, cut) for share, cut in model.thresholds.items())
    if not points:
        raise RouterArtifactError("the router artifact has no calibration")
    if q <= points[0][0]:
        return points[0][1]
    for (q0, c0), (q1, c1) in zip(points, points[1:], strict=False):
        if q <= q1:
            return c0 + (c1 - c0) * (q - q0) / (q1 - q0) if q1 > q0 else c1
    return points[-1][1]


def build_routed(policy: Policy, log: logging.Logger) -> dict[str, RoutedAlias]:
    """Every routed alias of the policy, with its models loaded (raises ConfigError naming the key)."""
    prices = {p.name: p.price for p in policy.pools}
    # Artifacts by path, loaded once however many aliases use them.
    models: dict[str | None, DifficultyModel] = {}
    predictors: dict[str | None, SuccessScorer] = {}
    trained: dict[str | None, TrainedAnswerScorer] = {}
    out: dict[str, RoutedAlias] = {}
    for i, m in enumerate(policy.models):
        rp = m.route.policy
        if rp is None:
            continue
        where = f"models[{i}] ('{m.name}').route.policy"
        rp = rp.with_prices(prices)
        scorer = _trained_scorer(rp, where, trained)
        success: SuccessScorer | None = None
        columns: tuple[int, ...] = ()
        if rp.success is not None:
            problem = rp.price_order_problem()  # again, now that the pools' prices are filled in
            if problem is not None:
                raise ConfigError(f"{where}.tiers: {problem} (prices from the tiers or their pools)")
            model, success, columns, fallback = _success(rp, where, m.name, models, predictors, log)
            thresholds = None
        else:
            model, thresholds, fallback = _difficulty(rp, where, m.name, models, log)
        out[m.name] = RoutedAlias(
            name=m.name,
            policy=rp,
            pools=tuple(t.pool for t in rp.tiers),
            thresholds=thresholds,
            cascade=Cascade.from_config(rp.cascade, scorer),
            difficulty=model,
            fallback=fallback,
            logprobs=rp.cascade is not None and any(isinstance(s, LogprobScorer) for s in rp.cascade.scorers),
            calibration=_live_calibration(rp) if model is not None else None,
            guard=_cost_guard(rp),
            success=success,
            columns=columns,
        )
    return out


def _success(
    rp: RoutingPolicy,
    where: str,
    alias: str,
    models: dict[str | None, DifficultyModel],
    predictors: dict[str | None, SuccessScorer],
    log: logging.Logger,
) -> tuple[DifficultyModel | None, SuccessScorer | None, tuple[int, ...], str | None]:
    """(model thread, success predictor, tier columns, why requests start at the fallback tier)."""
    assert rp.success is not None
    from router.difficulty import DifficultyModel, SuccessScorer

    path = rp.success.model
    try:
        # Any difficulty model already loaded: one inference thread for the core, not one per artifact.
        model = next(iter(models.values()), None)
        if model is None:
            model = models[None] = DifficultyModel.load(None)
        scorer = predictors.get(path) or SuccessScorer.load(model, path)
        predictors[path] = scorer
    except (OSError, RouterArtifactError) as exc:
        if rp.success.on_unavailable != "fallback":
            raise ConfigError(
                f"{where}.success: the success predictor cannot be loaded: {exc} (rebuild the encoder "
                "with `make router-encoder`, point `success.model` at a valid artifact, or set "
                "`success.on_unavailable: fallback`)"
            ) from exc
        start = rp.fallback_tier or 0
        fallback = (
            f"success predictor unavailable ({exc}); every request starts at tier {start} "
            f"('{rp.tiers[start].pool}')"
        )
        log.warning("routed alias '%s': %s", alias, fallback)
        return None, None, (), fallback
    try:
        columns = tier_columns(scorer.predictor, [t.like for t in rp.tiers])
    except ValueError as exc:
        raise ConfigError(f"{where}.tiers: {exc}") from exc
    return model, scorer, columns, None


def _cost_guard(rp: RoutingPolicy) -> CostGuard | None:
    if rp.cascade is None or rp.cascade.cost_budget is None:
        return None
    from router.cost_guard import CostGuard, shipped_prior

    # From the first request at the offset the alias's fitted prior gives for the budget (issue 45).
    return CostGuard(rp.cascade.cost_budget, prior=shipped_prior([t.pool for t in rp.tiers], rp.cascade))


def _live_calibration(rp: RoutingPolicy) -> LiveCalibration | None:
    """The live cut of a two-way `target_strong_share` split (0 and 1 need no learning); with `success`,
    the live tolerance for its target share at the strongest tier (router/tiers.py)."""
    d = rp.success or rp.difficulty
    if d is None or d.calibration is None or d.target_strong_share is None:
        return None
    if not 0.0 < d.target_strong_share < 1.0:
        return None
    from router.calibration import LiveCalibration  # ddsketch loads only when a live cut is used

    return LiveCalibration(d.target_strong_share, **d.calibration.model_dump())


def _trained_scorer(
    rp: RoutingPolicy, where: str, trained: dict[str | None, TrainedAnswerScorer]
) -> TrainedAnswerScorer | None:
    """The cascade's trained answer scorer, if it has one (loaded once per artifact)."""
    scorer: TrainedAnswerScorer | None = None
    if rp.cascade is not None:
        for s in rp.cascade.scorers:
            if isinstance(s, TrainedScorer):
                try:
                    scorer = trained.get(s.artifact) or TrainedAnswerScorer.load(s.artifact)
                except (OSError, ScorerArtifactError) as exc:
                    msg = f"{where}.cascade: the answer scorer cannot be loaded: {exc}"
                    raise ConfigError(msg) from exc
                trained[s.artifact] = scorer
    return scorer


def _difficulty(
    rp: RoutingPolicy,
    where: str,
    alias: str,
    models: dict[str | None, DifficultyModel],
    log: logging.Logger,
) -> tuple[DifficultyModel | None, tuple[float, ...] | None, str | None]:
    """(difficulty model, tier thresholds, why requests start at the fallback tier) of one alias."""
    if rp.difficulty is None:
        return None, resolve_thresholds(rp, None), None
    # Imported here: numpy, onnxruntime and the encoder load only when a model is used.
    from router.difficulty import DifficultyModel

    try:
        model = models.get(rp.difficulty.model) or DifficultyModel.load(rp.difficulty.model)
        models[rp.difficulty.model] = model
        thresholds = resolve_thresholds(
            rp, _equal_share_cuts(model, len(rp.tiers)), functools.partial(_quantile, model)
        )
    except (OSError, RouterArtifactError) as exc:
        if rp.difficulty.on_unavailable != "fallback":
            raise ConfigError(
                f"{where}.difficulty: the router model cannot be loaded: {exc} "
                "(rebuild the encoder with `make router-encoder`, point `difficulty.model` at a "
                "valid artifact, or set `difficulty.on_unavailable: fallback`)"
            ) from exc
        start = rp.fallback_tier or 0
        fallback = (
            f"router model unavailable ({exc}); every request starts at tier {start} "
            f"('{rp.tiers[start].pool}')"
        )
        log.warning("routed alias '%s': %s", alias, fallback)
        return None, None, fallback
    except ValueError as exc:
        raise ConfigError(f"{where}.difficulty: {exc}") from exc
    return model, thresholds, None


def call_body(body: Mapping[str, Any], pool_model: str, logprobs: bool) -> bytes:
    """One cascade call: the client's normalized request, unary, on the tier's served model."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    out["model"] = pool_model
    if logprobs:
        out["logprobs"] = True
    return orjson.dumps(out)


def answer_of(call: Call, parsed: Mapping[str, Any], price_cost: Any) -> Answer:
    """A pool's chat completion as the cascade's Answer (text, token logprobs, usage, cost)."""
    choices = parsed.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") or {}
    text = message.get("content") if isinstance(message, dict) else None
    lp = first.get("logprobs")
    logprobs: tuple[float, ...] | None = None
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        logprobs = tuple(float(t["logprob"]) for t in lp["content"] if isinstance(t, dict) and "logprob" in t)
    usage = parsed.get("usage") or {}
    # A pool's usage is untrusted (its callers check it against the reservation); never below zero.
    inp = max(0, int(usage.get("prompt_tokens") or 0))
    out = max(0, int(usage.get("completion_tokens") or 0))
    cost = price_cost(inp, out) if price_cost is not None else None
    return Answer(call, text if isinstance(text, str) else "", logprobs, None, inp, out, cost)


def summed_usage(answers: Sequence[Answer]) -> dict[str, int]:
    inp, out = total_tokens(answers)
    return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}


def sse_of(parsed: Mapping[str, Any], usage: Mapping[str, int] | None) -> bytes:
    """An accepted unary chat completion replayed as an OpenAI chat.completion.chunk stream."""
    base = {
        "id": parsed.get("id", "chatcmpl-llmgw"),
        "object": "chat.completion.chunk",
        "created": parsed.get("created", int(time.time())),
        "model": parsed.get("model", ""),
    }
    events: list[bytes] = []
    finishes = []
    for choice in parsed.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        idx = choice.get("index", 0)
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": j, **tc} for j, tc in enumerate(message["tool_calls"])]
        first = {"index": idx, "delta": delta, "finish_reason": None}
        events.append(orjson.dumps({**base, "choices": [first]}))
        finishes.append({"index": idx, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"})
    if finishes:
        events.append(orjson.dumps({**base, "choices": finishes}))
    if usage is not None:
        events.append(orjson.dumps({**base, "choices": [], "usage": dict(usage)}))
    return b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
