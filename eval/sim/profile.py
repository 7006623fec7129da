"""Simulator profiles: the latency model and capacity of one simulated replica.

A profile is a frozen pydantic model (unknown keys are rejected, naming the key) loaded from a built-in
name (`instant`, `small`, `large`) or a YAML file; CLI flags override single fields afterwards. Latency
parameters are in milliseconds. The step model (docs/design/002-simulator.md):

    step_ms = step_base_ms                                  (if the step runs anything)
            + prefill_per_token_ms  * uncached prompt tokens admitted this step
            + decode_per_seq_ms     * sequences decoding this step
            + decode_per_kv_token_ms * KV tokens held by those sequences

With `speculative` (vLLM's `--speculative-config`), decode sequences are charged per verified token
plus the draft cost (`eval/sim/speculation.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from eval.sim.speculation import SpecDecode


class ProfileError(ValueError):
    """A profile could not be loaded; the message names the file and the offending key."""


class SimProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step_base_ms: float = Field(0.0, ge=0, description="fixed cost of one engine forward pass")
    prefill_per_token_ms: float = Field(0.0, ge=0, description="cost per uncached prompt token")
    decode_per_seq_ms: float = Field(0.0, ge=0, description="cost per running sequence in a decode step")
    decode_per_kv_token_ms: float = Field(0.0, ge=0, description="attention cost per KV token read")
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1, description="prefill token budget per step")
    kv_capacity_tokens: int = Field(262144, ge=1)
    block_size: int = Field(16, ge=1)
    max_model_len: int = Field(8192, ge=2)
    enable_prefix_caching: bool = True
    output_len_mean: float = Field(128.0, gt=0, description="mean sampled answer length (tokens)")
    output_len_sigma: float = Field(0.6, ge=0, description="log-normal sigma of the answer length")
    embedding_dim: int = Field(384, ge=1)
    seed: int = 0
    speculative: SpecDecode | None = Field(None, description="speculative decoding (vLLM's spec config)")

    @model_validator(mode="after")
    def _context_fits_in_kv(self) -> SimProfile:
        # vLLM refuses to start when one max-length sequence cannot fit in the KV cache; keeping the same
        # invariant guarantees a lone sequence can always be admitted, so the scheduler cannot deadlock.
        if self.max_model_len > self.num_blocks * self.block_size:
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the KV cache "
                f"({self.num_blocks * self.block_size} tokens); raise kv_capacity_tokens"
            )
        return self

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def is_instant(self) -> bool:
        return (
            self.step_base_ms == 0
            and self.prefill_per_token_ms == 0
            and self.decode_per_seq_ms == 0
            and self.decode_per_kv_token_ms == 0
        )


def builtin_profiles() -> dict[str, dict[str, Any]]:
    """Named profiles. Returned fresh on each call (no shared mutable module state)."""
    return {
        # Zero latency: measures the gateway's own overhead.
        "instant": {"kv_capacity_tokens": 1 << 22, "max_model_len": 32768, "max_num_seqs": 1024},
        # ~8B model on one 80 GB GPU: 0.1 ms/prompt token, ~8 ms decode step (+0.15 ms per sequence);
        # ~430k KV tokens (128 KiB/token fp16 in ~56 GB).
        "small": {
            "step_base_ms": 8.0,
            "prefill_per_token_ms": 0.1,
            "decode_per_seq_ms": 0.15,
            "decode_per_kv_token_ms": 0.00002,
            "kv_capacity_tokens": 430000,
            "max_model_len": 32768,
            "max_num_seqs": 256,
        },
        # ~70B (fp8) on one large GPU: ~3.5x slower steps and a much smaller KV cache.
        "large": {
            "step_base_ms": 28.0,
            "prefill_per_token_ms": 0.35,
            "decode_per_seq_ms": 0.5,
            "decode_per_kv_token_ms": 0.00007,
            "kv_capacity_tokens": 131072,
            "max_model_len": 32768,
            "max_num_seqs": 128,
        },
    }


def format_validation_error(source: str, exc: ValidationError) -> str:
    """`FILE: 'key.path': message; unknown key 'x'` (also used by eval/loadgen workloads)."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key '{key}'")
        else:
            parts.append(f"'{key}': {err['msg']}")
    return f"{source}: " + "; ".join(parts)


def build_profile(source: str, data: dict[str, Any], overrides: dict[str, Any] | None = None) -> SimProfile:
    merged = {**data, **(overrides or {})}
    try:
        return SimProfile.model_validate(merged)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(source, exc)) from exc


def load_profile(name_or_path: str | None, overrides: dict[str, Any] | None = None) -> SimProfile:
    """Resolve a built-in name or a YAML file, then apply `overrides` (flags); validation covers both."""
    if name_or_path is None:
        return build_profile("defaults", {}, overrides)
    builtins = builtin_profiles()
    if name_or_path in builtins:
        return build_profile(f"profile {name_or_path}", builtins[name_or_path], overrides)
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(builtins))
        raise ProfileError(f"{name_or_path}: neither a built-in profile ({known}) nor a file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of profile keys")
    return build_profile(str(path), data, overrides)
