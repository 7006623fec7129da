"""Read the load of one replica from its vLLM Prometheus text (pure).

Only the few families the picker needs are read, summed over label sets (one per engine / model):
queue (`vllm:num_requests_waiting`), batch (`vllm:num_requests_running`), KV-cache use
(`vllm:kv_cache_usage_perc`, or the deprecated `vllm:gpu_cache_usage_perc` that vLLM < 0.10 and
some forks still export; KV use is averaged, not summed, over engines), and the prefix-cache token
counters (`vllm:prefix_cache_queries_total` / `_hits_total`; older vLLM: `vllm:gpu_prefix_cache_*`),
and the speculative-decoding counters when the replica runs with a speculative config
(`pools.spec_decode`: drafts, draft tokens, accepted tokens, accepted tokens per position), and
the adapters with running and waiting requests of a LoRA replica (`vllm:lora_requests_info`).
A hand-written line scan: the full Prometheus parser costs ~10x more for a page of histograms we skip.
"""

from __future__ import annotations

import math
import re

from pools.lora import parse_lora_info
from pools.replica import Load
from pools.spec_decode import counters_of, parse_line

_SUMMED = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:gpu_prefix_cache_queries_total": "queries",
    "vllm:gpu_prefix_cache_hits_total": "hits",
    # Per-request mean TPOT: the speculative rule's TPOT-vs-batch curve (pools.tpot_curve).
    "vllm:request_time_per_output_token_seconds_sum": "tpot_sum",
    "vllm:request_time_per_output_token_seconds_count": "tpot_count",
}
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_LORA = "vllm:lora_requests_info"
# A replica's page is not trusted: queue counts are clamped here, so a huge one cannot overflow the
# load bound's arithmetic (pools.picker.bounded_loads) and a negative one cannot win every pick.
MAX_QUEUE = 1_000_000.0
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _sample(line: str) -> tuple[str, float] | None:
    brace = line.find("{")
    if brace >= 0:
        name = line[:brace]
        end = line.rfind("}")
        rest = line[end + 1 :].split()
    else:
        name, *rest = line.split()
    if not rest:
        return None
    try:
        value = float(rest[0])
    except ValueError:
        return None
    # NaN and ±Inf are valid exposition but no count or ratio a picker can compare: skip the sample.
    return (name, value) if math.isfinite(value) else None


def _count(value: float) -> float:
    return min(max(value, 0.0), MAX_QUEUE)


def parse_load(text: str, at: float) -> Load | None:
    """The replica's load, or None when the page has no vLLM queue metrics (not a vLLM server)."""
    sums = dict.fromkeys(("waiting", "running", "queries", "hits", "tpot_sum", "tpot_count"), 0.0)
    seen = False
    kv: dict[str, list[float]] = {name: [] for name in _KV}
    spec: dict[str, float] = {}
    spec_pos: dict[int, float] = {}
    lora: list[tuple[dict[str, str], float]] = []
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        sample = _sample(line)
        if sample is None:
            continue
        name, value = sample
        if name.startswith("vllm:spec_decode_"):
            if name.endswith("_total"):  # not the `_created` gauges
                parse_line(name, line[len(name) :], value, spec, spec_pos)
            continue
        field = _SUMMED.get(name)
        if field is not None:
            sums[field] += value
            seen = seen or field in ("waiting", "running")
        elif name in kv:
            kv[name].append(value)
        elif name == _LORA:
            lora.append((dict(_LABEL.findall(line[len(name) : line.rfind("}")])), value))
    if not seen:
        return None
    values = kv[_KV[0]] or kv[_KV[1]]
    kv_usage = sum(values) / len(values) if values else 0.0
    return Load(
        waiting=_count(sums["waiting"]),
        running=_count(sums["running"]),
        kv_usage=min(max(kv_usage, 0.0), 1.0),
        prefix_queries=sums["queries"],
        prefix_hits=sums["hits"],
        at=at,
        tpot_sum=sums["tpot_sum"],
        tpot_count=sums["tpot_count"],
        spec=counters_of(spec, spec_pos),
        lora=parse_lora_info(lora),
    )
