"""Configuration of a routed alias: the tiers it may use, how the start tier is picked, the cascade.

Embedded by the gateway policy YAML under a model's route (`models: - name: auto; route: {policy:
{...}}`). Frozen pydantic models that reject unknown keys, like gateway/config.py, but with no import
of `gateway` (design §2): the gateway validates that `tiers[].pool` names exist; this module validates
everything that is local to one routed alias.

    tiers:                          # cheap -> strong; the last tier is the strong one
      - {pool: mixtral}
      - {pool: yi}
      - {pool: gpt4}
    difficulty: {thresholds: [0.3, 0.8]}   # optional; default: the router artifact's calibration
    # or, instead of `difficulty`, the N-tier success policy (docs/design/033-n-tier-policy.md):
    # each tier names the model of the success predictor's data it behaves like (`like:`), and a
    # request starts at the cheapest tier whose predicted success is within `tolerance` of the best.
    # success: {tolerance: 0.05}
    cascade:
      scorers: [{kind: agreement, mode: tiers, accept_threshold: 0.5}]
      max_escalations: 2
      stream_mode: buffer
    latency_budget_ms: 20000
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Price(_Frozen):
    """USD per million tokens; a pool's price in the gateway YAML has the same shape."""

    # Finite: an infinite price would make every cost inf and the cost guard's share NaN.
    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    cached_input_per_mtok: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="input tokens the engine served from its prefix cache (vLLM's "
        "`prompt_tokens_details.cached_tokens`); unset: priced as input",
    )

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class Tier(_Frozen):
    pool: str = Field(min_length=1, description="a pool name of the gateway policy")
    price: Price | None = Field(None, description="overrides the pool's price for this alias")
    typical_latency_ms: float | None = Field(
        None, gt=0, description="expected end-to-end time of one call; used against the latency budget"
    )
    like: str | None = Field(
        None,
        min_length=1,
        description="the model of the success predictor's training data this tier's pool behaves like "
        "(e.g. Meta-Llama-3.1-8B-Instruct; checked against the artifact's models at start-up); "
        "needed by `success`",
    )


class LiveCalibration(_Frozen):
    """Learn the `target_strong_share` cut from live traffic (router/calibration.py); the artifact's
    cut is used until `min_samples` scores are seen."""

    window: int = Field(1000, ge=1, description="requests per sketch rotation (the cut rests on 1-2 windows)")
    min_samples: int = Field(
        200, ge=1, description="scores needed before the live cut replaces the artifact's"
    )
    gain: float = Field(4.0, ge=0, description="feedback of the realized strong share into the quantile")


class Memory(_Frozen):
    """Outcome memory of a routed alias (router/memory.py): judged outcomes of its own traffic, blended
    with the model's prior by kNN over prompt embeddings. Learns without a restart or a training job."""

    capacity: int = Field(
        2_000,
        ge=1,
        le=50_000,
        description="outcomes kept (a ring: the oldest is overwritten). Each request's query reads them all "
        "on the event loop: measured ~0.08 ms at 1k, ~0.8 ms at 10k, ~7.5 ms at 50k (docs/design/023)",
    )
    k: int = Field(64, ge=1, le=1024, description="neighbours per query")
    blend_c: float = Field(
        128.0,
        gt=0,
        description="weight of the memory = n_eff / (n_eff + blend_c), n_eff the summed similarity",
    )
    feedback: Literal["org", "shared"] = Field(
        "org",
        description="org: a tenant org's ratings (POST /v1/feedback) teach only that org's own memory, "
        "blended after the shared one for its requests alone; shared: they teach the alias's memory, "
        "which every org's routing reads (opt in only when the orgs trust each other). Exploration and "
        "cascade outcomes, judged by the gateway, always teach the shared memory",
    )
    org_capacity: int = Field(256, ge=1, le=50_000, description="outcomes kept per org (feedback: org)")
    max_orgs: int = Field(
        256, ge=1, description="org memories kept per replica (least recently used dropped first)"
    )


class Difficulty(_Frozen):
    """The difficulty model of a routed alias and overrides of its calibration: N-1 cut points over N
    tiers, or a strong share (neither: the artifact's calibration, tiers sharing traffic equally)."""

    model: str | None = Field(
        None, description="router model artifact directory; default: the one the package ships"
    )
    on_unavailable: Literal["refuse", "fallback"] = Field(
        "refuse",
        description="the model cannot be loaded: refuse to start, or start every request at "
        "`fallback_tier` (logged at start-up and exported as llmgw_router_fallback)",
    )

    thresholds: tuple[float, ...] | None = Field(
        None, description="ascending cut points in [0,1]; difficulty >= thresholds[i] starts above tier i"
    )
    target_strong_share: float | None = Field(
        None, ge=0, le=1, description="start at the strong tier for this share of traffic (two-way split)"
    )
    calibration: LiveCalibration | None = Field(
        default_factory=LiveCalibration,
        description="live calibration of the target_strong_share cut (on by default, `null` = off); "
        "it never applies to fixed `thresholds`, so their behaviour is unchanged",
    )
    memory: Memory | None = Field(
        None, description="learn from this alias's judged outcomes (exploration, cascade steps, feedback)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> Difficulty:
        if self.thresholds is not None and self.target_strong_share is not None:
            raise ValueError("give thresholds or target_strong_share, not both")
        t = self.thresholds
        if t is not None and (any(not 0 <= x <= 1 for x in t) or list(t) != sorted(t)):
            raise ValueError(f"thresholds must be ascending values in [0, 1], got {list(t)}")
        return self


class Success(_Frozen):
    """The N-tier success policy (router/tiers.py): a success predictor gives, per request, the
    probability that each tier's model answers correctly; the request starts at the cheapest tier whose
    probability is within `tolerance` of the best tier's. Tiers are ordered cheap -> strong, so the
    cheapest qualifying tier is the first one."""

    model: str | None = Field(
        None, description="success predictor artifact directory; default: the one the package ships"
    )
    tolerance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="a tier qualifies when its predicted success is >= the best tier's minus this",
    )
    target_strong_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description="learn the tolerance from live traffic so that this share of requests starts at the "
        "strongest tier (`tolerance` is used until `calibration.min_samples` requests are seen); "
        "unset: the tolerance is fixed",
    )
    calibration: LiveCalibration | None = Field(
        default_factory=LiveCalibration,
        description="how the tolerance is learnt with target_strong_share (`null` = keep `tolerance`)",
    )
    on_unavailable: Literal["refuse", "fallback"] = Field(
        "refuse",
        description="the predictor or the encoder cannot be loaded: refuse to start, or start every "
        "request at `fallback_tier` (logged and exported as llmgw_router_fallback)",
    )


class LogprobScorer(_Frozen):
    kind: Literal["logprob"]
    reduce: Literal["mean", "min"] = Field("mean", description="mean or min token log-probability")
    accept_threshold: float = Field(0.5, ge=0, le=1, description="accept when exp(reduced logprob) >= this")


class AgreementScorer(_Frozen):
    kind: Literal["agreement"]
    mode: Literal["tiers", "samples"] = Field(
        "tiers", description="tiers: call two adjacent cheap tiers together; samples: two samples of one"
    )
    accept_threshold: float = Field(
        0.5, ge=0, le=1, description="accept when this share of the other answers has the same final answer"
    )


class TrainedScorer(_Frozen):
    kind: Literal["trained"]
    artifact: str | None = Field(None, description="path of a scorer artifact; default: the shipped one")
    accept_threshold: float = Field(0.5, ge=0, le=1, description="accept when P(answer is good) >= this")


class SchemaScorer(_Frozen):
    """Output conformance (issue 31): an answer to a request with `response_format: json_schema` is
    accepted only when it parses and validates against that schema; requests without one always pass
    it. The request's schema is bound per request (router/cascade.py `Cascade.with_schema`)."""

    kind: Literal["schema"]
    accept_threshold: float = Field(1.0, gt=0, le=1, description="scores are 1 (conforms) or 0")


ScorerConfig = Annotated[
    LogprobScorer | AgreementScorer | TrainedScorer | SchemaScorer, Field(discriminator="kind")
]


class Cascade(_Frozen):
    scorers: tuple[ScorerConfig, ...] = Field(
        min_length=1, description="an answer is accepted when every scorer accepts it"
    )
    max_escalations: int = Field(1, ge=0, description="at most this many steps after the first")
    stream_mode: Literal["buffer", "route_only"] = Field(
        "buffer", description="streaming requests: score then stream the accepted answer, or route only"
    )
    cost_budget: float | None = Field(
        None,
        gt=0,
        le=1,
        description="keep realized cost <= this share of strong-only cost (the strong tier's price on the "
        "same tokens) by lowering accept thresholds online (router/cost_guard.py); None = as configured",
    )

    @property
    def mode(self) -> Literal["single", "tiers", "samples"]:
        """How a step's calls are formed: from the agreement scorer if there is one."""
        for s in self.scorers:
            if isinstance(s, AgreementScorer):
                return s.mode
        return "single"


class Explore(_Frozen):
    """Bounded exploration: a share of the cheap-routed requests is also sent to the strong tier in the
    background (never returned to the client), and a judge says whether the cheap answer was good
    enough. Its outcomes feed the memory and the live estimate (router/estimate.py)."""

    rate: float = Field(gt=0, le=1, description="share of cheap-routed requests also sent to the strong tier")
    judge: Literal["agreement", "grader"] = Field(
        "agreement",
        description="agreement: final answers agree (closed-form answers); grader: the strong tier grades "
        "the cheap answer with a judge prompt (open-ended answers; one more strong call)",
    )
    tier: str = Field(
        min_length=1,
        description="tenancy tier whose limits bound the gateway-owned budget (org `llmgw-explore`) that "
        "every exploration call is charged to",
    )
    window_s: float = Field(3600.0, gt=0, description="window of the live estimate (seconds)")
    max_inflight: int = Field(8, ge=1, description="exploration calls in flight at once (more are skipped)")


class RoutingPolicy(_Frozen):
    tiers: tuple[Tier, ...] = Field(min_length=1, description="cheap -> strong; the last is the strong one")
    difficulty: Difficulty | None = None
    success: Success | None = Field(
        None,
        description="start by per-tier predicted success instead of difficulty (every tier needs `like`)",
    )
    cascade: Cascade | None = Field(None, description="absent: route only (one tier, failover upwards)")
    explore: Explore | None = Field(None, description="bounded exploration of cheap-routed requests")
    latency_budget_ms: float | None = Field(
        None, gt=0, description="default budget when the request gives none; None = unlimited"
    )
    min_headroom: float = Field(
        0.0, ge=0, le=1, description="tiers whose pool SLO headroom is at or below this are skipped"
    )
    risk_floor: dict[str, int] = Field(
        default_factory=dict, description="risk flag -> lowest tier index a flagged request may start at"
    )
    fallback_tier: int | None = Field(
        None, description="start tier when there is no difficulty model; None = the cheapest tier"
    )

    @model_validator(mode="after")
    def _consistent(self) -> RoutingPolicy:
        n = len(self.tiers)
        pools = [t.pool for t in self.tiers]
        if len(set(pools)) != n:
            raise ValueError(f"tier pools repeat: {pools}")
        if (
            self.difficulty
            and self.difficulty.thresholds is not None
            and len(self.difficulty.thresholds) != n - 1
        ):
            raise ValueError(f"{n} tiers need {n - 1} difficulty thresholds")
        if self.success is not None:
            if self.difficulty is not None:
                # Two sources for one start tier would leave one of them silently unused.
                raise ValueError("give difficulty or success, not both: each picks the start tier")
            unlike = [t.pool for t in self.tiers if t.like is None]
            if unlike:
                raise ValueError(
                    f"success needs every tier to say which model it is like (`like:`); missing on {unlike}"
                )
        for flag, tier in self.risk_floor.items():
            if not 0 <= tier < n:
                raise ValueError(f"risk_floor[{flag!r}] = {tier} is not a tier index (0..{n - 1})")
        if self.fallback_tier is not None and not 0 <= self.fallback_tier < n:
            raise ValueError(f"fallback_tier {self.fallback_tier} is not a tier index (0..{n - 1})")
        if self.explore is not None and n < 2:
            raise ValueError("explore needs at least two tiers (a cheap one to check against the strong one)")
        problem = self.price_order_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def price_order_problem(self) -> str | None:
        """Why the priced tiers are not ordered cheap -> strong (None: they are). Checked on the YAML's
        own prices here, and again by the gateway once pools' prices are filled in for a policy whose
        start tier depends on it (`success`: "the cheapest tier" is the first qualifying one)."""
        prices = [t.price for t in self.tiers]
        for i in range(len(prices) - 1):
            a, b = prices[i], prices[i + 1]
            if (
                a is not None
                and b is not None
                and a.output_per_mtok + a.input_per_mtok > (b.output_per_mtok + b.input_per_mtok)
            ):
                # A cascade only saves money when it tries cheaper tiers first.
                return f"tiers must be ordered cheap -> strong: tier {i} costs more than tier {i + 1}"
        return None

    def with_prices(self, prices: dict[str, Price | None]) -> RoutingPolicy:
        """Fill tiers without a price from the pools' prices (pool name -> price)."""
        tiers = tuple(
            t if t.price is not None else t.model_copy(update={"price": prices.get(t.pool)})
            for t in self.tiers
        )
        return self.model_copy(update={"tiers": tiers})
