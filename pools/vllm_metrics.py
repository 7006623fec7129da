"""Read the load of one replica from its vLLM Prometheus text (pure).

Only the few families the picker needs are read, summed over label sets (one per engine / model):
queue (`vllm:num_requests_waiting`), batch (`vllm:num_requests_running`), KV-cache use
(`vllm:kv_cache_usage_perc`, or the deprecated `vllm:gpu_cache_usage_perc` that vLLM < 0.10 and
some forks still export; KV use is averaged, not summed, over engines), and the prefix-cache token
counters (`vllm:prefix_cache_queries_total` / `_hits_total`; older vLLM: `vllm:gpu_prefix_cache_*`).
A hand-written line scan: the full Prometheus parser costs ~10x more for a page of histograms we skip.
"""

from __future__ import annotations

from pools.replica import Load

_SUMMED = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:gpu_prefix_cache_queries_total": "queries",
    "vllm:gpu_prefix_cache_hits_total": "hits",
}
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


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
        return name, float(rest[0])
    except ValueError:
        return None


def parse_load(text: str, at: float) -> Load | None:
    """The replica's load, or None when the page has no vLLM queue metrics (not a vLLM server)."""
    sums = {"waiting": 0.0, "running": 0.0, "queries": 0.0, "hits": 0.0}
    seen = False
    kv: dict[str, list[float]] = {name: [] for name in _KV}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        sample = _sample(line)
        if sample is None:
            continue
        name, value = sample
        field = _SUMMED.get(name)
        if field is not None:
            sums[field] += value
            seen = seen or field in ("waiting", "running")
        elif name in kv:
            kv[name].append(value)
    if not seen:
        return None
    values = kv[_KV[0]] or kv[_KV[1]]
    kv_usage = sum(values) / len(values) if values else 0.0
    return Load(
        waiting=sums["waiting"],
        running=sums["running"],
        kv_usage=kv_usage,
        prefix_queries=sums["queries"],
        prefix_hits=sums["hits"],
        at=at,
    )
