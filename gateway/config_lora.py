"""LoRA adapters in the policy file: the adapters a pool serves on its base model, and their checks.

A pool with `lora` serves its base model and each declared adapter (vLLM `--enable-lora`; the engine
addresses an adapter by its name in `model`). An alias reaches an adapter either by naming it in its
route (`route: {pool: base-8b, adapter: support-v2}`) or, on an alias of the base pool, per request
as `model: "<alias>:<adapter>"`. `runtime_loading` lets the gateway load an adapter on the replica it
picked (`/v1/load_lora_adapter`) instead of every replica starting with all of them
(`--lora-modules`). docs/design/028-lora-adapters.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from router.config import Price

if TYPE_CHECKING:
    from gateway.config_pool import Pool
    from gateway.config_route import Route

__all__ = ["ADAPTER_SEPARATOR", "Adapter", "AdapterName", "Lora", "lora_problems"]

Problem = tuple[tuple[str | int, ...], str]

# `model: "<alias>:<adapter>"`: no alias or adapter name contains it.
ADAPTER_SEPARATOR = ":"
AdapterName = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Adapter(_Frozen):
    name: AdapterName = Field(description="the adapter's served name (what the engine gets in `model`)")
    source: str = Field(
        min_length=1,
        max_length=4096,
        description="where the engine finds it: a path on the replica (or a URI its resolver takes)",
    )
    rank: int = Field(ge=1, le=512, description="the adapter's LoRA rank (at most the pool's max_rank)")
    price: Price | None = Field(None, description="overrides the pool's price for this adapter's requests")


class Lora(_Frozen):
    max_loras: int = Field(1, ge=1, le=256, description="adapters one replica holds at once (--max-loras)")
    max_rank: int = Field(16, ge=1, le=512, description="largest rank the engine accepts (--max-lora-rank)")
    runtime_loading: bool = Field(
        False,
        description="the gateway loads an adapter on the replica it picked when that replica does not "
        "have it (vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); false: every replica starts with "
        "all adapters (--lora-modules)",
    )
    affinity: bool = Field(
        True,
        description="adapter-aware picking: replicas holding the adapter first, then free slots, under a "
        "load bound; false: the pool's balancing alone",
    )
    load_factor: float = Field(
        1.5,
        ge=1.0,
        description="bounded load: a replica that holds the adapter is preferred while its load is under "
        "load_factor x the pool's mean (one hot adapter spills instead of pinning one replica)",
    )
    load_timeout_s: float = Field(60.0, gt=0, description="one /v1/load_lora_adapter call")
    load_backoff_s: float = Field(
        5.0,
        gt=0,
        description="after a failed load, requests for that adapter on that replica fail at once for this "
        "long (doubling per further failure, up to load_backoff_max_s) instead of loading again",
    )
    load_backoff_max_s: float = Field(
        300.0, gt=0, description="the longest backoff after repeated failed loads"
    )
    relist_s: float = Field(
        30.0, gt=0, description="how often the adapters each replica serves are re-read from /v1/models"
    )
    adapters: tuple[Adapter, ...] = Field(min_length=1, description="the adapters this pool serves")

    @model_validator(mode="after")
    def _consistent(self) -> Lora:
        seen: set[str] = set()
        for a in self.adapters:
            if a.name in seen:
                raise ValueError(f"duplicate adapter name '{a.name}'")
            seen.add(a.name)
            if a.rank > self.max_rank:
                raise ValueError(f"adapter '{a.name}' has rank {a.rank}, above max_rank {self.max_rank}")
        return self

    def adapter(self, name: str) -> Adapter | None:
        for a in self.adapters:
            if a.name == name:
                return a
        return None


def lora_problems(i: int, route: Route, pools: Mapping[str, Pool]) -> list[Problem]:
    """What is wrong with models[i]'s adapter: it needs a pool that declares it."""
    if route.adapter is None:
        return []
    where = ("models", i, "route", "adapter")
    pool = pools.get(route.pool) if route.pool is not None else None
    if pool is None:
        return []  # the unknown pool is reported already
    if pool.lora is None:
        return [(where, f"pool '{pool.name}' serves no adapters (it has no lora section)")]
    if pool.lora.adapter(route.adapter) is None:
        names = [a.name for a in pool.lora.adapters]
        owner = [p.name for p in pools.values() if p.lora is not None and p.lora.adapter(route.adapter)]
        also = f"; it is pool '{owner[0]}''s" if owner else ""
        msg = f"pool '{pool.name}' declares no adapter '{route.adapter}' (adapters: {names}){also}"
        return [(where, msg)]
    return []
