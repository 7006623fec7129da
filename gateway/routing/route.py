"""Where a request goes: an alias's settings on one pool (the relay's unit of routing)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Model
from gateway.observability.metrics import AliasMetrics
from gateway.upstream.pool_client import PoolClient


@dataclass(frozen=True, slots=True)
class Route:
    model: Model
    pool: PoolClient
    metrics: AliasMetrics

    def count_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.metrics.input_tokens.inc(input_tokens)
        self.metrics.output_tokens.inc(output_tokens)
