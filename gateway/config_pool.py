"""A pool in the policy file: what it serves, where its replicas are, its timeouts and price.

Part of the policy (`gateway.config`, which re-exports every name here); frozen pydantic models that
reject unknown keys like the rest of it. The replica-level knobs (balancing, saturation, retries,
breaker, admission) are `pools.config`'s, embedded here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config_lora import Lora
from pools.config import Admission, Balancing, Breaker, Endpoints, Retries, Saturation
from pools.spec_decode import DEFAULT_WINDOW_S
from ratelimit.model import OnBackendError
from router.config import Price

PoolName = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
Endpoint = Literal["chat", "completions", "embeddings"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Timeouts(_Frozen):
    connect_s: float = Field(5.0, gt=0, description="TCP connect to a replica")
    first_token_s: float = Field(60.0, gt=0, description="request sent -> response headers / first chunk")
    total_s: float = Field(600.0, gt=0, description="whole request, including the full stream")


class GpuHourPrice(_Frozen):
    """A self-hosted pool's price as GPU time, turned into a per-token price by its measured throughput.

    USD per output token = usd_per_gpu_hour x gpus_per_replica / (3600 x output_tokens_per_s), where
    `output_tokens_per_s` is what one replica sustains at the load-tested operating point (e.g. the
    throughput `llmgw bench` reports at the concurrency the pool runs at). Input tokens cost
    `input_weight` of an output token (prefill is batched and far cheaper per token than decode).
    """

    usd_per_gpu_hour: float = Field(gt=0)
    gpus_per_replica: int = Field(1, ge=1)
    output_tokens_per_s: float = Field(gt=0, description="measured throughput of one replica")
    input_weight: float = Field(0.1, ge=0, description="cost of an input token relative to an output token")

    def per_mtok(self) -> Price:
        out = self.usd_per_gpu_hour * self.gpus_per_replica / (3600.0 * self.output_tokens_per_s) * 1e6
        return Price(input_per_mtok=out * self.input_weight, output_per_mtok=out)


class Speculative(_Frozen):
    """The pool's engine runs speculative decoding (vLLM `--speculative-config`, which the chart passes).

    Every key but `acceptance_window_s` is the engine's: `engine_config()` is the JSON the chart hands
    to `--speculative-config`. The gateway reads the spec-decode counters of such a pool and exports its
    acceptance over `acceptance_window_s` (docs/design/027-speculative-pools.md)."""

    method: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] = Field(
        description="vLLM's speculative method: ngram, eagle, eagle3, mtp, draft_model, suffix, ..."
    )
    num_speculative_tokens: int = Field(ge=1, le=64, description="draft tokens proposed per step (k)")
    model: str | None = Field(
        None, min_length=1, description="the draft model (draft_model, eagle, ...); not for ngram"
    )
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram: longest n-gram matched")
    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram: shortest n-gram matched")
    extra: dict[str, str | int | float | bool] = Field(
        {}, description="other SpeculativeConfig keys, passed to the engine as given"
    )
    acceptance_window_s: float = Field(
        DEFAULT_WINDOW_S,
        gt=0,
        description="gateway: window of the exported acceptance figures (counter increases)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Speculative:
        if self.method == "ngram" and self.model is not None:
            raise ValueError("method ngram proposes from the prompt: it takes no draft model")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) is larger than prompt_lookup_max ({hi})")
        clash = set(self.extra) & (set(Speculative.model_fields) - {"extra"})
        if clash:
            raise ValueError(f"extra repeats a named key: {sorted(clash)}")
        return self

    def engine_config(self) -> dict[str, str | int | float | bool]:
        """What `--speculative-config` gets (JSON), the gateway-only keys left out."""
        named = self.model_dump(exclude={"extra", "acceptance_window_s"}, exclude_none=True)
        return {**named, **self.extra}


class Pool(_Frozen):
    name: PoolName
    engine: Literal["vllm", "openai", "litellm"] = Field(
        "vllm", description="vllm, any OpenAI-compatible server, or litellm (hosted providers)"
    )
    model: str = Field(
        min_length=1,
        description="the model name the pool serves (litellm: provider/model, e.g. anthropic/...)",
    )
    endpoints: Endpoints | None = Field(
        None, description="replicas (required unless litellm; for litellm: optional static api_base URLs)"
    )
    serves: frozenset[Endpoint] = Field(
        frozenset({"chat", "completions"}), description="which OpenAI endpoints this pool answers"
    )
    api_key_env: Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")] | None = Field(
        None, description="environment variable holding the pool's API key (never the key itself)"
    )
    timeouts: Timeouts = Timeouts()
    price: Price | None = Field(
        None, description="USD per million input/output tokens: cost accounting and routed aliases"
    )
    gpu_hour: GpuHourPrice | None = Field(
        None, description="price as GPU time and measured throughput (sets `price`; give one of the two)"
    )
    balancing: Balancing = Field(Balancing(), description="replica picking (round_robin, least_load, ...)")
    saturation: Saturation = Field(Saturation(), description="when a replica takes no more requests")
    retries: Retries = Field(Retries(), description="retries before the first byte, under a budget")
    breaker: Breaker = Field(Breaker(), description="per-replica circuit breaker")
    admission: Admission = Field(Admission(), description="holding requests when no replica can take them")
    speculative: Speculative | None = Field(
        None, description="the engine runs speculative decoding (vLLM pools): method, draft tokens, ..."
    )
    lora: Lora | None = Field(
        None, description="LoRA adapters served on this pool's base model (vLLM --enable-lora)"
    )
    on_backend_error: OnBackendError | None = Field(
        None,
        description="when the limiter's Redis fails: fail_open (admit with the local approximate limiter) "
        "or fail_closed (503). Unset: fail_closed for engine litellm (billed APIs: an outage must not "
        "become unmetered spend), else limits.on_backend_error (self-hosted: fail_open costs GPU time, "
        "not money)",
    )

    def backend_error_mode(self, default: OnBackendError) -> OnBackendError:
        """This pool's failure mode: its own setting, else fail_closed for litellm, else `default`
        (`limits.on_backend_error`). `engine: openai` counts as self-hosted: it is how the gateway
        speaks to OpenAI-compatible servers it runs (hosted providers go through litellm); a pool that
        points it at a billed API says `on_backend_error: fail_closed`."""
        if self.on_backend_error is not None:
            return self.on_backend_error
        return "fail_closed" if self.engine == "litellm" else default

    @model_validator(mode="before")
    @classmethod
    def _price_from_gpu_hour(cls, data: Any) -> Any:
        # Everything that reads `price` (cost accounting, routed tiers) then works unchanged.
        if isinstance(data, dict) and data.get("gpu_hour") is not None:
            if data.get("price") is not None:
                raise ValueError("give either price or gpu_hour, not both")
            gpu = GpuHourPrice.model_validate(data["gpu_hour"])
            data = {**data, "gpu_hour": gpu, "price": gpu.per_mtok()}
        return data

    @model_validator(mode="after")
    def _endpoints_fit_the_engine(self) -> Pool:
        if self.endpoints is None and self.engine != "litellm":
            raise ValueError(f"a pool with engine {self.engine} needs endpoints")
        if self.engine == "litellm" and self.endpoints is not None and not self.endpoints.static:
            raise ValueError("a litellm pool takes only static endpoints (its api_base URLs)")
        if self.speculative is not None and self.engine != "vllm":
            raise ValueError("speculative needs engine vllm (the gateway reads vLLM's spec-decode counters)")
        if self.lora is not None:
            if self.engine != "vllm":
                raise ValueError("lora needs engine vllm (adapters are loaded and listed the vLLM way)")
            if self.lora.adapter(self.model) is not None:
                raise ValueError(f"an adapter may not be named like the base model '{self.model}'")
        return self
