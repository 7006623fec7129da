"""`/metrics`: vLLM's exposed metric names, read from the engine at scrape time.

A custom collector in an app-owned `CollectorRegistry` (no global registry) turns `EngineStats` and the
engine's gauges into metric families on each scrape, so the request path never touches
prometheus_client. Counters are declared without `_total`, as vLLM does; the exposition adds it.
Every family carries `model_name` (the first served name) and `engine="0"`, except
`vllm:lora_requests_info` (with `--enable-lora`; labels `max_lora`, `waiting_lora_adapters`,
`running_lora_adapters` only, one sample per label set with the time it was last set, see `lora.py`).
`sim:lora_swaps_total` is the simulator's own: adapters copied into a GPU slot (vLLM exports no such count).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from eval.sim.engine import Engine
from eval.sim.stats import Histogram

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class EngineCollector(Collector):
    def __init__(self, engine: Engine, model_name: str, legacy: bool) -> None:
        self._engine = engine
        self._labels = [model_name, "0"]
        self._legacy = legacy

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        g.add_metric(self._labels, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
        c.add_metric(self._labels, value)
        return c

    def _histogram(self, name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
        fam.add_metric(self._labels, h.cumulative(), h.total)
        return fam

    def collect(self) -> Iterator[Metric]:
        e, s = self._engine, self._engine.stats
        p = e.profile
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", len(e.running)
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(e.waiting)
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage
        )
        if self._legacy:  # deprecated in vLLM 0.9, gone in 0.32; only with --legacy-metrics (older vLLM)
            yield self._gauge(
                "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", e.kv_usage
            )
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "enable_prefix_caching", "num_gpu_blocks", "engine"],
        )
        info.add_metric([str(p.block_size), str(p.enable_prefix_caching), str(p.num_blocks), "0"], 1.0)
        yield info
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.num_preemptions
        )
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits,
        )
        yield self._counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local prefix cache).",
            s.prompt_tokens_cached,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "engine", "finished_reason"],
        )
        for reason, count in s.finished.items():
            success.add_metric([*self._labels, reason], count)
        yield success
        if p.speculative is not None:  # vLLM registers these only with a speculative config
            yield from self._spec_decode()
        if e.lora is not None:  # vLLM registers the info gauge only with a LoRA config
            info = GaugeMetricFamily(
                "vllm:lora_requests_info",
                "Running stats on lora requests.",
                labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            )
            max_lora = str(e.lora.settings.max_loras)
            for (waiting, running), at in e.lora.info.samples.items():
                info.add_metric([max_lora, waiting, running], at)
            yield info
            yield self._counter(
                "sim:lora_swaps", "Adapters swapped into a GPU slot (simulator only).", e.lora.slots.swaps
            )
        yield self._histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft
        )
        yield self._histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.itl
        )
        yield self._histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            s.tpot,
        )
        yield self._histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e
        )
        yield self._histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            s.queue_time,
        )

    def _spec_decode(self) -> Iterator[Metric]:
        s = self._engine.spec_stats
        yield self._counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.drafts)
        yield self._counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.draft_tokens)
        yield self._counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.accepted)
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["model_name", "engine", "position"],
        )
        k = self._engine.profile.speculative
        depth = k.num_speculative_tokens if k is not None else 0
        counts = s.per_position + [0] * (depth - len(s.per_position))
        for i, count in enumerate(counts):
            per_pos.add_metric([*self._labels, str(i)], count)
        yield per_pos


def build_registry(engine: Engine, model_name: str, legacy: bool) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine, model_name, legacy))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
