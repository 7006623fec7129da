"""The policy's `drift` section: an opt-in background canary comparing pools that serve the same weights.

```yaml
drift:
  pairs: [{a: reference, b: quantized}]   # pool names; each pair is compared every `every_s`
  every_s: 300
  max_tokens: 16
  bound: {max_mean_abs_logprob: 0.05}     # breached: llmgw_pool_drift_exceeded 1 (LLMGatewayPoolDrift)
```

Part of the policy (`gateway.config`); frozen, unknown keys rejected. `drift_references` checks what
pydantic cannot see: the pools exist and answer chat. The comparison is `pools.drift` (the same
function as `llmgw drift`); the runner is `gateway.upstream.drift_canary`. Design:
docs/design/026-drift-monitor.md.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config_pool import Pool, PoolName
from pools.drift_answer import CANARY_PROMPTS, MAX_TOP_LOGPROBS

__all__ = ["DriftBound", "DriftConfig", "DriftPair", "drift_references"]

Prompt = Annotated[str, Field(min_length=1, max_length=4000)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DriftBound(_Frozen):
    """Where a pair counts as drifting; an absent measure is not bounded."""

    # bf16 vs fp32 of the same weights measured 0.015 (docs/design/026): 0.05 flags more than a
    # precision change, e.g. a wrong quantization or different weights.
    max_mean_abs_logprob: float | None = Field(
        0.05, ge=0, description="mean |Δ logprob| of the chosen token over the shared prefixes"
    )
    max_kl: float | None = Field(None, ge=0, description="mean top-k KL(a‖b) (pools.drift's estimator)")
    min_match_ratio: float | None = Field(
        None, ge=0, le=1, description="share of prompts whose greedy continuations are identical"
    )


class DriftPair(_Frozen):
    a: PoolName = Field(description="the reference pool")
    b: PoolName = Field(description="the pool compared with it")
    bound: DriftBound | None = Field(None, description="this pair's bound (default: drift.bound)")

    @model_validator(mode="after")
    def _two_pools(self) -> DriftPair:
        if self.a == self.b:
            raise ValueError(f"a pair compares two different pools (both are '{self.a}')")
        return self


class DriftConfig(_Frozen):
    pairs: list[DriftPair] = Field(min_length=1)
    every_s: float = Field(300.0, ge=1, description="seconds between two checks of every pair")
    prompts: list[Prompt] = Field(
        list(CANARY_PROMPTS), min_length=1, max_length=64, description="the canary prompts (greedy)"
    )
    max_tokens: int = Field(16, ge=1, le=512, description="tokens per canary continuation")
    top_logprobs: int = Field(5, ge=1, le=MAX_TOP_LOGPROBS, description="alternatives per token (KL)")
    timeout_s: float = Field(60.0, gt=0, description="one canary call; slower counts the check failed")
    bound: DriftBound = DriftBound()

    def bound_of(self, pair: DriftPair) -> DriftBound:
        return pair.bound if pair.bound is not None else self.bound


def drift_references(drift: DriftConfig | None, pools: list[Pool]) -> list[tuple[tuple[str | int, ...], str]]:
    """Pairs naming pools that do not exist or do not answer chat; a pair given twice."""
    if drift is None:
        return []
    by_name = {p.name: p for p in pools}
    problems: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[tuple[str, str]] = set()
    for i, pair in enumerate(drift.pairs):
        for side in ("a", "b"):
            name = getattr(pair, side)
            pool = by_name.get(name)
            if pool is None:
                problems.append(
                    (("drift", "pairs", i, side), f"unknown pool '{name}' (pools: {sorted(by_name)})")
                )
            elif "chat" not in pool.serves:
                problems.append((("drift", "pairs", i, side), f"pool '{name}' does not serve chat"))
        if (pair.a, pair.b) in seen:
            problems.append((("drift", "pairs", i), f"pair {pair.a}/{pair.b} is given twice"))
        seen.add((pair.a, pair.b))
    return problems
