"""Policy configuration: the YAML an operator writes (a ConfigMap in Kubernetes).

Parsed into frozen pydantic models that reject unknown keys. Every error names the file, the line
when it can be found, and the key path (`models[1].route.pool`), so `llmgw config check` and a
failed start-up point at the exact spot. Secrets never live here: a pool names the environment
variable that holds its key (`api_key_env`).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config_drift import DriftConfig
from gateway.config_guardrails import Guardrails
from gateway.config_pool import Endpoint, GpuHourPrice, Pool, PoolName, Timeouts
from gateway.config_refs import CACHE_POOL, references
from gateway.config_route import Route
from gateway.ledger.config import LedgerConfig
from ratelimit.model import TAG_PATTERN, LevelLimits, LimitsConfig

# The pool models live in gateway.config_pool; importers keep using `gateway.config` for all of them.
__all__ = [
    "CACHE_POOL",
    "DEFAULT_POLICY_YAML",
    "AppConfig",
    "CacheConfig",
    "ConfigError",
    "Endpoint",
    "GpuHourPrice",
    "Model",
    "ModelCache",
    "Name",
    "OrgConfig",
    "OutputTokens",
    "Policy",
    "Pool",
    "PoolName",
    "Route",
    "SemanticCache",
    "SloClass",
    "StaticKey",
    "Tenancy",
    "Timeouts",
    "default_policy",
    "key_path",
    "load_policy",
    "parse_policy",
]

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]


class ConfigError(Exception):
    """A policy file that cannot be used; the message names the file and the key path."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OutputTokens(_Frozen):
    default: int = Field(1024, ge=1, description="max_tokens sent when the client gives none")
    cap: int = Field(4096, ge=1, description="larger client values are lowered to this")

    @model_validator(mode="after")
    def _default_within_cap(self) -> OutputTokens:
        if self.default > self.cap:
            raise ValueError(f"default ({self.default}) must not exceed cap ({self.cap})")
        return self


class SemanticCache(_Frozen):
    """Answers to paraphrases of an earlier question (docs/design/015-cache.md). Opt-in per alias."""

    enabled: bool = False
    min_similarity: float = Field(
        0.5,
        gt=0,
        le=1,
        description="cosine similarity of the last user turn's embedding for a hit "
        "(eval/bench/cache/semantic_eval.py)",
    )
    ttl_s: float = Field(3600.0, gt=0, description="how long a semantic entry may answer")


# Where a pool must never be sent to fetch an image: link-local (cloud metadata at 169.254.169.254),
# loopback, private and shared address space, multicast, unspecified; IPv6 equivalents.
DEFAULT_BLOCKED_NETWORKS = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
)  # fmt: skip


class ImageUrls(_Frozen):
    """Image URLs in a request's content parts reach the pool, which fetches them from its own network:
    a client could make it fetch cloud metadata or internal services (SSRF). docs/design/025."""

    mode: Literal["allow", "https_only", "deny"] = Field(
        "https_only",
        description="allow: http(s) and data: URLs; https_only: https and data: URLs; deny: no image parts. "
        "In every mode but deny, URLs naming a blocked network or a local host name are refused (400)",
    )
    blocked_networks: tuple[str, ...] = Field(
        DEFAULT_BLOCKED_NETWORKS, description="IP networks an image URL must not name (literal addresses)"
    )

    @model_validator(mode="after")
    def _networks_parse(self) -> ImageUrls:
        for net in self.blocked_networks:
            ipaddress.ip_network(net, strict=False)  # a ValueError names the bad one
        return self


class ModelCache(_Frozen):
    """Response caching of one alias; without this block the alias is never cached."""

    default: Literal["deterministic", "off"] = Field(
        "deterministic",
        description="deterministic: requests with temperature 0 or a seed are cached; off: only requests "
        "sending `x-llmgw-cache: on`. `x-llmgw-cache: off` always bypasses",
    )
    ttl_s: float = Field(300.0, gt=0, description="how long an exact entry may answer")
    scope: Literal["org", "app", "key"] = Field(
        "org", description="who may share answers: the whole org, one app, or one key"
    )
    semantic: SemanticCache = SemanticCache()


class CacheConfig(_Frozen):
    """Where cached answers live; each alias opts in with its own `cache` block."""

    backend: Literal["memory", "redis"] = Field(
        "memory", description="memory: this process only; redis: shared by every replica (LLMGW_REDIS_URL)"
    )
    max_entry_bytes: int = Field(1 << 20, ge=1024, description="larger answers are not stored")
    memory_max_bytes: int = Field(64 << 20, ge=1 << 20, description="memory backend: total bytes kept")
    semantic_max_tokens: int = Field(
        128,
        ge=8,
        le=512,
        description="the semantic cache embeds a question of at most this many tokens; longer ones are "
        "exact-cache only (the embedding would not see all of them)",
    )
    semantic_memory_entries: int = Field(10_000, ge=1, description="memory backend: semantic entries kept")


class Model(_Frozen):
    name: Name = Field(description="what clients send in `model`")
    route: Route
    cache: ModelCache | None = Field(None, description="response caching (absent: never cached)")
    max_tokens: OutputTokens = OutputTokens()
    images: ImageUrls = ImageUrls()
    slo_class: str | None = Field(None, description="key of slo_classes used for goodput")
    guardrails: str | None = Field(None, description="guardrail profile (guardrails.profiles) of this alias")
    description: str = ""
    display_name: str | None = Field(
        None, max_length=128, description="the human-readable name in model listings (default: the name)"
    )
    context_tokens: int | None = Field(
        None, ge=1, description="the model's context window in tokens, for model listings (max_input_tokens)"
    )


class SloClass(_Frozen):
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    on_unattainable: Literal["queue", "reroute", "shed"] = Field(
        "queue",
        description="a request its saturated pool would hold past ttft_ms (pools.slo predicts it): queue "
        "(wait anyway), reroute (another pool of its alias the key may use that is predicted to meet it; "
        "else shed), shed (503 at once, code slo_unattainable, with Retry-After)",
    )

    @model_validator(mode="after")
    def _action_needs_ttft(self) -> SloClass:
        if self.on_unattainable != "queue" and self.ttft_ms is None:
            raise ValueError("on_unattainable other than queue needs ttft_ms (the target that is predicted)")
        return self

    @model_validator(mode="after")
    def _at_least_one(self) -> SloClass:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("an SLO class needs at least one of ttft_ms, tpot_ms, e2e_ms")
        return self


class AppConfig(_Frozen):
    name: Name
    limits: LevelLimits | None = Field(None, description="overrides of the tier's app-level limits")
    end_user_limits: LevelLimits | None = Field(
        None,
        description="the limits of each end user of this app (OpenAI's `user`, Anthropic's "
        "`metadata.user_id`), e.g. `{usd_per_day: 2}`; unset: end users are not limited",
    )


class OrgConfig(_Frozen):
    name: Name
    limits: LevelLimits | None = Field(None, description="overrides of the tier's org-level limits")
    apps: list[AppConfig] = []


class StaticKey(_Frozen):
    """A key declared in the policy (small deployments). Only its SHA-256 is written down."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the full key")]
    org: Name
    app: Name
    tier: str = "standard"
    models: frozenset[str] = Field(frozenset(), description="aliases this key may call; empty = all")
    pools: frozenset[str] = Field(
        frozenset(),
        description="pools this key's requests may be served by (a routed alias's plan is cut to them; "
        "a direct alias on another pool is refused); empty = the tier's `tenancy.tier_pools`, else all",
    )
    limits: LevelLimits | None = Field(None, description="overrides of the tier's key-level limits")
    tags: frozenset[Annotated[str, Field(pattern=TAG_PATTERN)]] | None = Field(
        None, description="the tags this key's requests may carry (limits.tags); unset: any declared tag"
    )


class Tenancy(_Frozen):
    auth: Literal["required", "disabled"] = Field(
        "required", description="disabled: every request is the anonymous tenant (trusted networks only)"
    )
    store: Literal["memory", "redis"] = Field(
        "memory", description="where keys created by `llmgw keys` / the admin API live"
    )
    cache_ttl_s: float = Field(
        5.0, gt=0, le=5.0, description="key lookups are fresh this long (the delay of missed revocations)"
    )
    stale_ttl_s: float = Field(
        600.0,
        ge=0,
        description="while the key store is unavailable, a key looked up successfully within this many "
        "seconds keeps working from the stale cache (revoked ones stay revoked; keys never seen get 503); "
        "applies under fail_open and fail_closed alike (fail_closed still refuses at admission); 0 = off",
    )
    lookup_timeout_s: float = Field(
        1.0, gt=0, le=10.0, description="a key store lookup taking longer counts as the store unavailable"
    )
    anonymous_tier: str = "standard"
    tier_pools: dict[str, frozenset[str]] = Field(
        {},
        description="tier -> the pools its keys may be served by when a key names no `pools` of its own "
        "(absent tier: all pools)",
    )
    orgs: list[OrgConfig] = []
    keys: list[StaticKey] = []


class Policy(_Frozen):
    """The whole policy file."""

    pools: list[Pool] = Field(min_length=1)
    models: list[Model] = Field(min_length=1)
    slo_classes: dict[Name, SloClass] = {}
    limits: LimitsConfig = LimitsConfig()
    tenancy: Tenancy = Tenancy()
    cache: CacheConfig = CacheConfig()
    guardrails: Guardrails = Guardrails()
    drift: DriftConfig | None = Field(None, description="background drift canary between pool pairs")
    ledger: LedgerConfig = Field(
        LedgerConfig(), description="the spend ledger: one row per finished request in PostgreSQL"
    )

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)


def key_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_of(root: yaml.Node | None, loc: tuple[str | int, ...]) -> int | None:
    """1-based line of the deepest node along `loc` in the composed YAML tree."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if nxt is None:
                key_node = next((k for k, _ in node.value if getattr(k, "value", None) == part), None)
                return key_node.start_mark.line + 1 if key_node is not None else line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return line
        line = node.start_mark.line + 1
    return line


def parse_policy(text: str, source: str) -> Policy:
    try:
        root = yaml.compose(text)
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the policy must be a mapping with keys pools, models, slo_classes")
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            loc = tuple(p for p in e["loc"] if p not in ("function-after",))
            where = _line_of(root, loc)
            at = f"{source}:{where}" if where else source
            msg = "unknown key (not allowed here)" if e["type"] == "extra_forbidden" else e["msg"]
            lines.append(f"{at}: {key_path(loc)}: {msg}")
        raise ConfigError("\n".join(lines)) from exc
    problems = references(policy)
    if problems:
        raise ConfigError(
            "\n".join(
                f"{source}:{_line_of(root, loc) or '?'}: {key_path(loc)}: {msg}" for loc, msg in problems
            )
        )
    return policy


def load_policy(path: str | Path) -> Policy:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read policy file: {exc.strerror}") from exc
    return parse_policy(text, str(p))


DEFAULT_POLICY_YAML = """\
# Embedded default: two simulated vLLM pools on localhost (what `make run` starts).
pools:
  - name: small
    model: small
    endpoints: {static: ["http://127.0.0.1:8001"]}
    serves: [chat, completions, embeddings]
  - name: large
    model: large
    endpoints: {static: ["http://127.0.0.1:8002"]}
models:
  - {name: small, route: {pool: small}, max_tokens: {default: 512, cap: 4096}, slo_class: interactive}
  - {name: large, route: {pool: large}, max_tokens: {default: 1024, cap: 8192}, slo_class: interactive}
slo_classes:
  interactive: {ttft_ms: 450, tpot_ms: 40}
  batch: {e2e_ms: 60000}
"""


def default_policy() -> Policy:
    return parse_policy(DEFAULT_POLICY_YAML, "<embedded default>")
