"""The limiter contract: configuration models, plain request/decision data and the `Limiter` protocol.

Vocabulary
- level: where a limit applies - `key`, `app`, `org`, `global`, `pool`. `org`, `global` and `pool`
  are *shared* levels: when they run hot, premium traffic keeps `premium_reserved_share` of them
  (standard traffic sees `limit * (1 - share)`; premium sees the whole limit).
- dimension: what is counted - `requests`, `input_tokens`, `output_tokens`, `tokens` (input+output),
  `concurrent` (slots held while a request runs), `tokens_day` / `tokens_month` (quotas).
- window: per-minute dimensions use a sliding window of `SUB_WINDOWS` sub-windows; quotas use the
  UTC calendar day / month; `concurrent` has no window (slots are leases).

A request is admitted all-or-nothing at every (level, dimension) that applies, reserving
`cost` (input estimate + max output tokens). Settlement replaces the reservation with the usage the
pool reported. Reservations and concurrency slots are leases (`lease_s`): a gateway that dies
without settling leaks nothing for longer than one lease.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal, NamedTuple, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ratelimit.errors import BackendUnavailable

# A tag: what a cost centre or project is called; never a label value of a metric.
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"

# Per-minute windows slide in 5 s steps: a refused request learns its Retry-After to within 5 s,
# and each check reads 12 sub-window counters per (level, dimension).
WINDOW_S = 60
SUB_WINDOWS = 12


class Level(StrEnum):
    KEY = "key"
    APP = "app"
    ORG = "org"
    GLOBAL = "global"
    POOL = "pool"
    TAG = "tag"  # a request's tag (`x-llmgw-tags`, `metadata.tags`): a budget shared by whoever sends it
    USER = "user"  # an end user of an app (OpenAI's `user`, Anthropic's `metadata.user_id`)


SHARED_LEVELS = frozenset({Level.ORG, Level.GLOBAL, Level.POOL})


class Dimension(StrEnum):
    REQUESTS = "requests"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    TOKENS = "tokens"
    CONCURRENT = "concurrent"
    TOKENS_DAY = "tokens_day"
    TOKENS_MONTH = "tokens_month"
    # Dollar budgets, counted in integer micro-dollars (a price in USD per million tokens is exactly
    # micro-dollars per token): Redis adds integers exactly, and the ledger sums to the same figure.
    USD_DAY = "usd_day"
    USD_MONTH = "usd_month"
    USD_TOTAL = "usd_total"


USD_DIMENSIONS = frozenset((Dimension.USD_DAY, Dimension.USD_MONTH, Dimension.USD_TOTAL))
MICRO_USD = 1_000_000


class Window(StrEnum):
    MINUTE = "minute"  # sliding, SUB_WINDOWS sub-windows of WINDOW_S / SUB_WINDOWS seconds
    DAY = "day"  # UTC calendar day
    MONTH = "month"  # UTC calendar month
    TOTAL = "total"  # never resets (a lifetime budget)
    NONE = "none"  # concurrency: leases only


WINDOW_OF: dict[Dimension, Window] = {
    Dimension.REQUESTS: Window.MINUTE,
    Dimension.INPUT_TOKENS: Window.MINUTE,
    Dimension.OUTPUT_TOKENS: Window.MINUTE,
    Dimension.TOKENS: Window.MINUTE,
    Dimension.CONCURRENT: Window.NONE,
    Dimension.TOKENS_DAY: Window.DAY,
    Dimension.TOKENS_MONTH: Window.MONTH,
    Dimension.USD_DAY: Window.DAY,
    Dimension.USD_MONTH: Window.MONTH,
    Dimension.USD_TOTAL: Window.TOTAL,
}

# Config field name -> dimension.
FIELD_DIMENSION: dict[str, Dimension] = {
    "requests_per_min": Dimension.REQUESTS,
    "input_tokens_per_min": Dimension.INPUT_TOKENS,
    "output_tokens_per_min": Dimension.OUTPUT_TOKENS,
    "tokens_per_min": Dimension.TOKENS,
    "concurrent": Dimension.CONCURRENT,
    "tokens_per_day": Dimension.TOKENS_DAY,
    "tokens_per_month": Dimension.TOKENS_MONTH,
    "usd_per_day": Dimension.USD_DAY,
    "usd_per_month": Dimension.USD_MONTH,
    "usd_total": Dimension.USD_TOTAL,
}
USD_FIELDS = frozenset(("usd_per_day", "usd_per_month", "usd_total"))

Priority = Literal["standard", "premium"]
# What a limiter call does when the shared backend cannot decide (`ratelimit.failover`).
OnBackendError = Literal["fail_open", "fail_closed"]


# -- configuration (part of the policy YAML; frozen, unknown keys rejected) ----------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


LimitName = Literal[
    "requests_per_min",
    "input_tokens_per_min",
    "output_tokens_per_min",
    "tokens_per_min",
    "concurrent",
    "tokens_per_day",
    "tokens_per_month",
    "usd_per_day",
    "usd_per_month",
    "usd_total",
]


class LevelLimits(_Frozen):
    """Limits of one level; unset = unlimited. Names in `shadow` are counted and reported, never enforced."""

    requests_per_min: int | None = Field(None, ge=0)
    input_tokens_per_min: int | None = Field(None, ge=0)
    output_tokens_per_min: int | None = Field(None, ge=0)
    tokens_per_min: int | None = Field(None, ge=0, description="input + output tokens per minute")
    concurrent: int | None = Field(None, ge=0, description="requests in flight at once")
    tokens_per_day: int | None = Field(None, ge=0, description="UTC calendar day quota, input + output")
    tokens_per_month: int | None = Field(None, ge=0, description="UTC calendar month quota, input + output")
    # Dollars at the pools' prices, reserved at the worst case of the request and settled to its cost.
    usd_per_day: float | None = Field(None, ge=0, le=1e9, allow_inf_nan=False, description="USD per UTC day")
    usd_per_month: float | None = Field(
        None, ge=0, le=1e9, allow_inf_nan=False, description="USD per UTC calendar month"
    )
    usd_total: float | None = Field(None, ge=0, le=1e9, allow_inf_nan=False, description="USD, never reset")
    shadow: frozenset[LimitName] = frozenset()

    def merged(self, override: LevelLimits | None) -> LevelLimits:
        """`override`'s explicitly set fields win over ours. The result sets only what either set, so
        it can itself be merged onto another level's limits (a run-time budget over a policy's)."""
        if override is None:
            return self
        data = self.model_dump(exclude_unset=True)
        data.update(override.model_dump(exclude_unset=True))
        return LevelLimits.model_validate(data)

    def items(self) -> list[tuple[Dimension, int, bool]]:
        """(dimension, limit, shadow) for every limit that is set."""
        out = []
        for name, dim in FIELD_DIMENSION.items():
            value = getattr(self, name)
            if value is not None:
                amount = round(value * MICRO_USD) if name in USD_FIELDS else int(value)
                out.append((dim, amount, name in self.shadow))
        return out


class TierLimits(_Frozen):
    priority: Priority = "standard"
    key: LevelLimits = LevelLimits()
    app: LevelLimits = LevelLimits()
    org: LevelLimits = LevelLimits()


class SpeculativeAdmission(_Frozen):
    """Overlap the admission round trip with the pool call (docs/design/017-speculative-admission.md).

    Off by default: the default is "reserve, then call the pool". On, a request of a key whose last
    admission in this process left every rule at least `min_headroom` of its limit, no longer than
    `memory_s` ago, is sent to a self-hosted pool while its reservation is in flight; nothing reaches the
    client before the reservation is granted, and a refusal cancels the pool call (vLLM aborts it).
    """

    enabled: bool = Field(
        False, description="overlap admission with the pool call for keys far from their limits"
    )
    min_headroom: float = Field(
        0.2, gt=0, lt=1, description="share of every rule's limit the key's last admission must have left"
    )
    memory_s: float = Field(
        1.0, gt=0, le=60, description="how long a key's last admission counts as recent enough to speculate"
    )
    max_inflight: int = Field(
        4,
        ge=1,
        description="speculate only while this process handles at most this many requests (the one "
        "deciding included): with more, its core is busy during the round trip anyway and the extra "
        "task costs more than it hides",
    )


class LimitsConfig(_Frozen):
    backend: Literal["memory", "redis"] = Field(
        "memory", description="memory: one process only (the embedded default); redis: shared by all replicas"
    )
    on_backend_error: OnBackendError = Field(
        "fail_open",
        description="Redis unavailable or failing (any error): fail_open = local approximate limiter per "
        "replica; fail_closed = 503. The default of pools that set no `on_backend_error` of their own, "
        "but for `engine: litellm` pools (billed APIs), which fail_closed unless they say otherwise",
    )
    lease_s: float = Field(30.0, gt=0, le=3600, description="reservation / concurrency-slot lease")
    sub_window_s: float = Field(
        WINDOW_S / SUB_WINDOWS,
        ge=0.05,
        le=WINDOW_S / SUB_WINDOWS,
        description="per-minute limits slide over 12 sub-windows of this length; the default makes the "
        "window one minute. Shorter values (the limit then applies per 12 x sub_window_s) are for load "
        "tests and demos",
    )
    stream_chunk_tokens: int = Field(
        256, ge=1, description="output tokens reserved at a time for streams without a client max_tokens"
    )
    input_bytes_per_token: float = Field(
        1.0,
        gt=0,
        description="input tokens are reserved as ceil(prompt bytes / this) + a per-message allowance. "
        "1.0 is a strict upper bound for byte-level BPE tokenizers (a token is at least one byte), which "
        "the window guarantee needs; a larger value (English prose is ~4 bytes/token) admits more while "
        "requests run, at the risk of under-reserving digit- or punctuation-heavy prompts",
    )
    premium_reserved_share: float = Field(
        0.0, ge=0, lt=1, description="share of shared levels (org, global, pool) only premium may use"
    )
    global_: LevelLimits = Field(LevelLimits(), alias="global")
    pools: dict[str, LevelLimits] = {}
    tiers: dict[str, TierLimits] = {"standard": TierLimits()}
    key_prefix: str = Field("llmgw", pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="Redis key prefix")
    tags: dict[Annotated[str, Field(pattern=TAG_PATTERN)], LevelLimits] = Field(
        {},
        description="the tags requests may carry (`x-llmgw-tags`, `metadata.tags`), each with its budget "
        "(`{}`: counted in the ledger, not limited); a tag not declared here or through the admin API is "
        "refused (400)",
    )
    max_tags: int = Field(8, ge=0, le=32, description="tags per request at most")
    quota_timezone: str = Field(
        "UTC",
        description="the IANA time zone whose calendar days and months the day and month quotas (tokens "
        "and dollars) follow, e.g. `America/New_York`: they reset at its midnight",
    )

    @field_validator("quota_timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        if v != "UTC":
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {v!r} (an IANA name such as Europe/Berlin)") from None
        return v

    growth_max_memory_ratio: float = Field(
        0.7,
        gt=0,
        le=1,
        description="state that grows with traffic (feedback records, cached answers) is written to the "
        "shared Redis only while its used_memory is under this share of maxmemory; the rest is the "
        "limiter's headroom (gateway/observability/redis_room.py)",
    )
    speculative: SpeculativeAdmission = SpeculativeAdmission()

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# -- per-request data -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who is asking: a key of an app of an org, with its tier and per-level overrides."""

    key_id: str
    app: str
    org: str
    tier: str
    priority: Priority = "standard"
    key_limits: LevelLimits | None = None
    app_limits: LevelLimits | None = None
    org_limits: LevelLimits | None = None
    end_user_limits: LevelLimits | None = None  # per end user of its app (None: end users are not limited)
    tags: frozenset[str] | None = None  # the tags its requests may carry (None: any declared tag)


@dataclass(frozen=True, slots=True)
class Overrides:
    """Limits changed at run time (the admin API), on top of the policy's: per key id, app scope
    (`scope_id(org, app)`), org, tag; `end_user` per app scope is the limit of each end user of it.
    `version` changes whenever any of them does, so a cache of resolved rules knows it is stale."""

    version: int = 0
    key: Mapping[str, LevelLimits] = field(default_factory=dict)
    app: Mapping[str, LevelLimits] = field(default_factory=dict)
    org: Mapping[str, LevelLimits] = field(default_factory=dict)
    tag: Mapping[str, LevelLimits] = field(default_factory=dict)
    end_user: Mapping[str, LevelLimits] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rule:
    """One enforced (or shadowed) limit: `limit` of `dimension` at `level` for `scope`."""

    level: Level
    scope: str  # key id, app id (org/app), org name, "*" for global, pool name
    dimension: Dimension
    limit: int
    shadow: bool = False
    reserved_share: float = 0.0  # only on shared levels

    def effective_limit(self, priority: Priority) -> int:
        if priority == "premium" or self.reserved_share <= 0:
            return self.limit
        return int(self.limit * (1.0 - self.reserved_share))


@dataclass(slots=True)
class Admission:
    """`request_id` must be unique per admission: it names the leases at every rule.

    Not frozen, like `Decision`: one of each is built per request, and a frozen dataclass's `__init__`
    costs three times a plain one's (`object.__setattr__` per field). Nothing mutates them."""

    request_id: str
    rules: tuple[Rule, ...]
    cost: Mapping[Dimension, int]  # requests=1, input_tokens, output_tokens, tokens (=in+out), ...
    priority: Priority = "standard"
    on_backend_error: OnBackendError | None = None  # None: the limiter's own mode (its pool's, per call)


class RuleState(NamedTuple):
    """A rule's state after a decision, for headers and 429 messages.

    A named tuple, not a frozen dataclass: every admission builds one per rule, and a frozen
    dataclass's `__init__` (an `object.__setattr__` per field) showed in hot-path profiles."""

    rule: Rule
    remaining: int
    reset_s: float  # seconds until the window is back to its full allowance


@dataclass(slots=True)
class Reservation:
    """What an admitted request holds at every rule (`reserved` also names its leases in Redis)."""

    request_id: str
    rules: tuple[Rule, ...]
    reserved: dict[Dimension, int]
    priority: Priority
    on_backend_error: OnBackendError | None = None  # its admission's, for its top-ups


@dataclass(slots=True)
class Decision:
    allowed: bool
    reservation: Reservation | None
    states: tuple[RuleState, ...] = ()
    refused_by: Rule | None = None
    retry_after_s: float = 0.0
    shadow_refusals: tuple[Rule, ...] = ()  # shadow rules that would have refused
    degraded: bool = False  # decided by the fail-open local limiter, not the shared backend


# Per dimension, the enforced rule with the smallest limit (for a priority) and that limit.
Ceilings = tuple[tuple[Dimension, int, Rule], ...]


def ceilings(rules: tuple[Rule, ...], priority: Priority) -> Ceilings:
    """The tightest enforced limit of each dimension (shadow rules never refuse)."""
    tightest: dict[Dimension, tuple[int, Rule]] = {}
    for rule in rules:
        limit = rule.effective_limit(priority)
        if not rule.shadow and (rule.dimension not in tightest or limit < tightest[rule.dimension][0]):
            tightest[rule.dimension] = (limit, rule)
    return tuple((dim, limit, rule) for dim, (limit, rule) in tightest.items())


def over_limit(limits: Ceilings, cost: Mapping[Dimension, int]) -> tuple[Rule, int, int] | None:
    """(rule, its limit, the cost) of a request no window could ever admit, or None."""
    for dim, limit, rule in limits:
        amount = cost.get(dim, 0)
        if amount > limit:
            return rule, limit, amount
    return None


# Told about a `settle_soon` a shared backend could not apply, and why (`ratelimit.failover.Shared`).
SettleFailed = Callable[[Reservation, Mapping[Dimension, int], BackendUnavailable], None]


class Limiter(Protocol):
    """The contract every backend implements (and the contract tests check)."""

    async def admit(self, admission: Admission) -> Decision: ...

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        """Reserve more (all or nothing across every rule); on success `reservation.reserved` grows."""
        ...

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        """Replace the reservation by real usage at every rule and release the concurrency slot."""
        ...

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        """`settle` for many reservations at once (the Redis backend sends one script call for all)."""
        ...

    def settle_soon(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        """`settle` in the background, never raising (the gateway's path: a finished request waits for
        nothing). The Redis backend carries it on its next admission's script call, or sends it within
        a few milliseconds; the failover limiter retries what Redis could not take."""
        ...

    async def flush(self) -> None:
        """Wait until every `settle_soon` so far has been applied or given up (shutdown)."""
        ...

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        """Extend the leases of requests still running (called periodically, batched)."""
        ...

    async def close(self) -> None: ...
