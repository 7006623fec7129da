"""Where a request goes: an alias's settings on one pool (the relay's unit of routing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config import Model
from gateway.config_lora import Adapter
from gateway.observability.metrics import AliasMetrics
from gateway.upstream.pool_client import PoolClient
from pools.slo import SloAsk


@dataclass(frozen=True, slots=True)
class Route:
    model: Model
    pool: PoolClient
    metrics: AliasMetrics
    adapter: Adapter | None = None  # a LoRA adapter of the pool serves it (the engine gets its name)
    # Its alias's SLO class as admission sees it (pools.slo): None without a TTFT action (just queue).
    slo: SloAsk | None = None
    # `x-llmgw-tier: <pool>` on every answer this route gives (built once, not per request).
    tier: tuple[bytes, bytes] = field(init=False)
    upstream_model: str = field(init=False)  # what the engine gets in `model`
    # The labels a request it served is counted under: alias, pool, adapter (metrics, log, traces).
    served: tuple[str, str, str | None] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tier", (b"x-llmgw-tier", self.pool.config.name.encode()))
        adapter = self.adapter
        object.__setattr__(self, "upstream_model", adapter.name if adapter else self.pool.config.model)
        labels = (self.model.name, self.pool.config.name, adapter.name if adapter else None)
        object.__setattr__(self, "served", labels)

    def count_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.metrics.input_tokens.inc(input_tokens)
        self.metrics.output_tokens.inc(output_tokens)
