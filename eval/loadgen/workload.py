"""Workload files for `llmgw bench`: what to send, how fast, and which SLOs define goodput.

A workload is YAML validated by frozen pydantic models that reject unknown keys; every error names the
file and the dotted key (`two-pools.yaml: 'requests.prompt_tokens.lognormal.sigma': ...`). Keys given as
`key_env` are read from the environment at load time, so a missing variable fails before any request.
Command-line flags (`--rate`, `--url`, ...) override single fields afterwards, through `with_overrides`,
and are validated by the same models.

Lengths are in tokens. `requests.prompt_tokens` is the length of the per-request (user) part; a
shared-prefix group adds its system prompt of `prefix.tokens` on top. Output lengths are sent as
`max_tokens` (plus `ignore_eos: true` when asked, which vLLM and the simulator honour, so the answer
really has that length).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from eval.sim.profile import format_validation_error
from gateway.config import SloClass


class WorkloadError(ValueError):
    """A workload could not be loaded; the message names the file and the offending key."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Fixed(_Frozen):
    dist: Literal["fixed"]
    value: int = Field(ge=1)


class Uniform(_Frozen):
    dist: Literal["uniform"]
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class LogNormal(_Frozen):
    """Parametrized by its mean (what people know about their traffic) rather than by mu."""

    dist: Literal["lognormal"]
    mean: float = Field(gt=0)
    sigma: float = Field(ge=0)
    min: int = Field(1, ge=1)
    max: int = Field(32768, ge=1)


class Choice(_Frozen):
    dist: Literal["choice"]
    values: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> Choice:
        if self.weights is not None and len(self.weights) != len(self.values):
            raise ValueError("weights must have one entry per value")
        if self.weights is not None and sum(self.weights) <= 0:
            raise ValueError("weights must not all be zero")
        return self


Length = Annotated[Fixed | Uniform | LogNormal | Choice, Field(discriminator="dist")]


class Target(_Frozen):
    base_urls: list[str] = Field(
        ["http://127.0.0.1:8080"], min_length=1, description="requests go round-robin over these"
    )
    api: Literal["chat", "completions"] = "chat"
    timeout_s: float = Field(120.0, gt=0, description="whole-request timeout")
    connect_timeout_s: float = Field(5.0, gt=0)


class Load(_Frozen):
    mode: Literal["open", "closed"] = "open"
    arrival: Literal["poisson", "constant"] = "poisson"
    rate: float = Field(1.0, gt=0, description="open loop: offered requests per second")
    concurrency: int = Field(8, ge=1, description="closed loop: requests in flight")
    max_inflight: int = Field(
        512, ge=1, description="open loop: connection limit; later arrivals queue client-side (counted)"
    )
    duration_s: float | None = Field(30.0, gt=0, description="stop issuing after this long")
    requests: int | None = Field(None, ge=1, description="stop after this many requests")
    warmup_s: float = Field(0.0, ge=0, description="requests started before this are not measured")

    @model_validator(mode="after")
    def _bounded(self) -> Load:
        if self.duration_s is None and self.requests is None:
            raise ValueError("set duration_s and/or requests")
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise ValueError(
                f"warmup_s ({self.warmup_s}) must be shorter than duration_s ({self.duration_s})"
            )
        return self


class Prefix(_Frozen):
    groups: int = Field(ge=1)
    tokens: int = Field(ge=1, description="length of each group's shared system prompt")
    share: float = Field(1.0, ge=0, le=1, description="fraction of requests that belong to a group")


class Dataset(_Frozen):
    path: Path
    limit: int | None = Field(None, ge=1, description="use the first N prompts")


class Requests(_Frozen):
    prompt_tokens: Length = Fixed(dist="fixed", value=256)
    output_tokens: Length = Fixed(dist="fixed", value=128)
    ignore_eos: bool = Field(False, description="vLLM extension: generate exactly max_tokens")
    stream_share: float = Field(1.0, ge=0, le=1, description="fraction of requests sent with stream: true")
    prefix: Prefix | None = None
    dataset: Dataset | None = Field(None, description="prompts from a routing JSONL file (field `prompt`)")


class Tenant(_Frozen):
    name: str
    key: str | None = None
    key_env: str | None = Field(None, description="environment variable holding the key")
    weight: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _one_key(self) -> Tenant:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("set exactly one of key, key_env")
        return self

    def resolve_key(self) -> str:
        if self.key is not None:
            return self.key
        assert self.key_env is not None  # guaranteed by _one_key
        value = os.environ.get(self.key_env)
        if not value:
            raise ValueError(f"environment variable {self.key_env} is not set")
        return value


class Alias(_Frozen):
    name: str
    weight: float = Field(1.0, gt=0)
    slo_class: str | None = None


class Sweep(_Frozen):
    rates: list[Annotated[float, Field(gt=0)]] = Field([], description="open loop offered loads, req/s")
    concurrencies: list[Annotated[int, Field(ge=1)]] = Field([], description="closed loop levels")
    knee_fraction: float = Field(0.9, gt=0, le=1, description="goodput / offered needed at the knee")

    @model_validator(mode="after")
    def _one_axis(self) -> Sweep:
        if self.rates and self.concurrencies:
            raise ValueError("sweep either rates or concurrencies, not both")
        return self


class Workload(_Frozen):
    name: str = "workload"
    seed: int = 0
    target: Target = Target()
    load: Load = Load()
    requests: Requests = Requests()
    tenants: list[Tenant] = []
    aliases: list[Alias] = Field([Alias(name="sim")], min_length=1)
    slo_classes: dict[str, SloClass] = {}
    default_slo_class: str | None = Field(None, description="for aliases without their own slo_class")
    sweep: Sweep | None = None

    @model_validator(mode="after")
    def _references(self) -> Workload:
        if self.default_slo_class is not None and self.default_slo_class not in self.slo_classes:
            raise ValueError(f"default_slo_class '{self.default_slo_class}' is not in slo_classes")
        for alias in self.aliases:
            if alias.slo_class is not None and alias.slo_class not in self.slo_classes:
                raise ValueError(f"alias '{alias.name}': slo_class '{alias.slo_class}' is not in slo_classes")
        return self

    def slo_for(self, alias: str) -> str | None:
        for a in self.aliases:
            if a.name == alias and a.slo_class is not None:
                return a.slo_class
        return self.default_slo_class


def build_workload(source: str, data: dict[str, Any]) -> Workload:
    """Validate `data` and resolve every tenant key now (a missing env var fails before the run)."""
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(source, exc)) from exc
    for i, tenant in enumerate(workload.tenants):
        try:
            tenant.resolve_key()
        except ValueError as exc:
            raise WorkloadError(f"{source}: 'tenants.{i}.key_env': {exc}") from exc
    return workload


def load_workload(path: str | Path | None) -> tuple[Workload, dict[str, Any]]:
    """The workload and its raw mapping (overrides are merged into the raw data, then re-validated)."""
    if path is None:
        return build_workload("defaults", {}), {}
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{p}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise WorkloadError(f"{p}: expected a mapping of workload keys")
    return build_workload(str(p), data), data


def with_overrides(source: str, data: dict[str, Any], overrides: dict[str, Any]) -> Workload:
    """Merge flags into the raw workload (`{section: {field: value}}` merges one level deep, other
    values replace), then validate the result."""
    merged = dict(data)
    for key, value in overrides.items():
        base = merged.get(key)
        if isinstance(value, dict) and isinstance(base, dict):
            merged[key] = {**base, **value}
        else:
            merged[key] = value
    return build_workload(source, merged)
