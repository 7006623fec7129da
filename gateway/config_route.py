"""An alias's route in the policy file: one pool, a routing policy, or a speculative pair.

Part of the policy (`gateway.config` re-exports `Route`). A speculative route serves one model from two
pools, one whose engine speculates (`pools[].speculative`) and one that does not, and sends each
request to the speculative pool only while speculation pays (docs/design/027-speculative-pools.md;
the decision is `router.speculative.choose_pool`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config_lora import AdapterName
from gateway.config_pool import Pool, PoolName
from router.config import RoutingPolicy

Problem = tuple[tuple[str | int, ...], str]
# What a Responses request's hosted tools (web search, file search, code interpreter, MCP, ...: tools
# OpenAI's servers run, which no pool can) get on this alias: dropped from the chat request, or a 400.
HostedTools = Literal["drop", "reject"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpeculativeRoute(_Frozen):
    """Speculate while the speculative pool is memory-bound and its drafts are being accepted."""

    pool: PoolName = Field(description="the pool whose engine speculates (has `speculative`)")
    plain: PoolName = Field(description="the same model without speculation")
    switch_batch: float = Field(
        gt=0,
        description="running batch per replica of the speculative pool at which the plain pool takes "
        "over (where speculation stops paying: measure it, e.g. `make bench-spec`, or let `learn` find it)",
    )
    min_acceptance: float = Field(
        0.5, ge=0, le=1, description="recent acceptance ratio below which the plain pool takes over"
    )
    min_draft_tokens: int = Field(
        200, ge=0, description="draft tokens the acceptance window must hold before the floor applies"
    )
    throughput_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="aliases whose SLO class has no ttft/tpot objective switch at this share of the "
        "switch point: latency-sensitive classes get the speculative headroom first",
    )
    learn: bool = Field(
        False,
        description="learn both pools' TPOT vs running batch from their scrapes: the switch point is "
        "where the curves cross (switch_batch until then), and a request goes to the plain pool when "
        "its expected TPOT there is lower",
    )

    @model_validator(mode="after")
    def _two_pools(self) -> SpeculativeRoute:
        if self.pool == self.plain:
            raise ValueError("pool and plain must be two different pools")
        return self


class Route(_Frozen):
    pool: PoolName | None = Field(None, description="the one pool this alias is served by")
    adapter: AdapterName | None = Field(
        None, description="with pool: the LoRA adapter (of the pool's lora.adapters) that serves the alias"
    )
    policy: RoutingPolicy | None = Field(None, description="a routed alias: tiers, difficulty, cascade")
    speculative: SpeculativeRoute | None = Field(
        None, description="a speculative and a plain pool of one model, chosen per request by load"
    )
    hosted_tools: HostedTools = Field(
        "drop",
        description="Responses requests' hosted tools (web_search, file_search, code_interpreter, "
        "image_generation, computer, mcp, tool_search): `drop` removes them from the request (the model "
        "sees only the client's own tools), `reject` answers 400 naming the tool "
        "(docs/design/022-dialects.md)",
    )

    @model_validator(mode="after")
    def _pool_or_policy(self) -> Route:
        if sum(x is not None for x in (self.pool, self.policy, self.speculative)) != 1:
            raise ValueError("a route needs exactly one of pool, policy or speculative")
        if self.adapter is not None and self.pool is None:
            raise ValueError("adapter goes with pool (the pool whose lora section declares it)")
        return self

    @property
    def pools(self) -> tuple[str, ...]:
        """Every pool the alias may call (one; the policy's tiers cheap -> strong; speculative, plain)."""
        if self.policy is not None:
            return tuple(t.pool for t in self.policy.tiers)
        if self.speculative is not None:
            return (self.speculative.pool, self.speculative.plain)
        assert self.pool is not None
        return (self.pool,)


def speculative_problems(i: int, route: Route, pools: Mapping[str, Pool]) -> list[Problem]:
    """What is wrong with models[i]'s speculative route given the policy's pools."""
    s = route.speculative
    if s is None:
        return []
    where = ("models", i, "route", "speculative")
    out: list[Problem] = []
    for key in ("pool", "plain"):
        if getattr(s, key) not in pools:
            out.append(((*where, key), f"unknown pool '{getattr(s, key)}' (pools: {sorted(pools)})"))
    if out:
        return out
    spec, plain = pools[s.pool], pools[s.plain]
    if spec.speculative is None:
        out.append(((*where, "pool"), f"pool '{s.pool}' has no speculative config"))
    if plain.speculative is not None:
        out.append(((*where, "plain"), f"pool '{s.plain}' speculates too: the fallback must not"))
    if spec.model != plain.model:
        out.append(((*where, "plain"), f"serves '{plain.model}', pool '{s.pool}' serves '{spec.model}'"))
    return out
