"""The pool-level policy an operator writes (embedded in gateway.config.Pool).

Frozen pydantic models that reject unknown keys, like the rest of the policy file.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Strategy = Literal["round_robin", "least_load", "prefix_affinity"]
Url = Annotated[str, Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DnsEndpoints(_Frozen):
    name: str = Field(min_length=1, description="a headless Service name; every A/AAAA record is a replica")
    port: int = Field(8000, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(5.0, gt=0, description="re-resolve period")
    nameserver: str | None = Field(
        None,
        pattern=r"^[0-9A-Fa-f.:\[\]]+$",
        description="ask this DNS server (IP or [IP]:port) directly; default: the system resolver",
    )


class KubernetesEndpoints(_Frozen):
    service: str = Field(min_length=1, description="Service whose EndpointSlices list the replicas")
    namespace: str | None = Field(None, description="default: the gateway's own namespace")
    port: int | str = Field(8000, description="port number, or the name of a port in the slices")
    scheme: Literal["http", "https"] = "http"


class Endpoints(_Frozen):
    """Exactly one discovery source."""

    static: list[Url] = Field(
        [], description="base URLs of the pool's replicas, e.g. http://vllm-small-0:8000"
    )
    dns: DnsEndpoints | None = None
    kubernetes: KubernetesEndpoints | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Endpoints:
        given = [k for k in ("static", "dns", "kubernetes") if getattr(self, k)]
        if len(given) != 1:
            got = given or "none"
            raise ValueError(f"give exactly one of static (non-empty), dns, kubernetes (got {got})")
        return self


class PrefixAffinity(_Frozen):
    prefix_chars: int = Field(
        2048, ge=16, description="leading prompt characters hashed into the affinity key (~500 tokens)"
    )
    load_factor: float = Field(
        1.25, ge=1.0, description="a preferred replica is passed over above this multiple of the mean load"
    )


class Balancing(_Frozen):
    strategy: Strategy = "least_load"
    choices: int = Field(
        2, ge=0, description="replicas sampled per least-load pick (power of two choices); 0 = all"
    )
    queue_weight: float = Field(1.0, ge=0, description="score per request waiting in the replica's queue")
    kv_weight: float = Field(4.0, ge=0, description="score at 100 % KV-cache use")
    prefix: PrefixAffinity = PrefixAffinity()
    scrape_interval_s: float = Field(0.5, gt=0, description="period of the /metrics scrape per replica")
    stale_after_s: float = Field(3.0, gt=0, description="scraped load older than this is ignored")


class SaturationSignals(_Frozen):
    """When the pool as a whole counts as saturated (pools.slo.saturation; the metric
    llmgw_pool_saturated): while it holds requests, or while two of these agree (means over replicas)."""

    waiting: float = Field(4.0, gt=0, description="the engines' waiting queue per replica at or above this")
    kv_usage: float = Field(0.9, gt=0, le=1.0, description="KV-cache use at or above this")
    ttft_s: float | None = Field(
        None, gt=0, description="the replicas' observed TTFT (EWMA) at or above this; absent: not a signal"
    )


class Saturation(_Frozen):
    """When a replica takes no more work (all replicas saturated = the pool holds requests)."""

    kv_usage: float = Field(0.97, gt=0, le=1.0, description="scraped KV-cache use at or above this")
    waiting: int = Field(64, ge=1, description="scraped waiting queue at or above this")
    inflight: int = Field(256, ge=1, description="this gateway's in-flight requests at or above this")
    signals: SaturationSignals = Field(
        SaturationSignals(), description="when the pool counts as saturated (a metric, not a refusal)"
    )


class Retries(_Frozen):
    attempts: int = Field(2, ge=1, description="tries per request, first included (before the first byte)")
    budget_ratio: float = Field(
        0.2, ge=0, le=1.0, description="retries allowed as a share of recent requests (retry budget)"
    )
    budget_min_per_s: float = Field(2.0, ge=0, description="retries always allowed per second")


class Breaker(_Frozen):
    failures: int = Field(5, ge=1, description="consecutive failures that open a replica's breaker")
    open_s: float = Field(10.0, gt=0, description="time open before a half-open probe is let through")


# Hold-queue priority bands by name (a tier's `priority` in the gateway's limits; the drift canary and
# the explorer's background requests are band -1): higher bands are served first.
BANDS: dict[str, int] = {"premium": 1, "standard": 0, "background": -1}
LowerBand = Literal["standard", "background"]
Weight = Annotated[float, Field(gt=0)]


class Fairness(_Frozen):
    """How held requests share a saturated pool (pools.fair, docs/design/010-pools.md)."""

    enabled: bool = Field(
        True,
        description="weighted fair queuing between tenants and minimum shares of lower bands; false: "
        "strict priority then arrival order",
    )
    by: Literal["org", "app"] = Field("org", description="the tenant: an org, or each app of an org")
    tier_weights: dict[str, Weight] = Field(
        {}, description="tier name -> weight of its tenants (default 1): the share of tokens when backlogged"
    )
    org_weights: dict[str, Weight] = Field({}, description="org name -> weight; overrides its tier's")
    min_share: dict[LowerBand, Annotated[float, Field(ge=0, lt=1)]] = Field(
        {"standard": 0.05},
        description="band -> share of dispatched tokens it keeps while a higher band is backlogged "
        "(0: strict priority, it waits until the higher bands are empty)",
    )

    @model_validator(mode="after")
    def _shares_leave_room(self) -> Fairness:
        if sum(self.min_share.values()) >= 1:
            raise ValueError("the min_share values must add up to less than 1 (the top band needs a share)")
        return self


class Admission(_Frozen):
    max_queued: int = Field(256, ge=0, description="requests held per pool at most; more get 503 at once")
    max_wait_s: float = Field(
        10.0, ge=0, description="longest hold while every replica is saturated or breaker-open"
    )
    cold_start_timeout_s: float = Field(
        120.0, ge=0, description="longest hold while the pool has no ready replica (scale from zero)"
    )
    fairness: Fairness = Field(Fairness(), description="the order held requests are served in")
