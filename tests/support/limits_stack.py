"""Helpers of the limiter's e2e tests: policies, Prometheus text, the limiter's Redis keys, streamed calls."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.prom import metric

PREFIX = "llmgw:{llmgw}"


@dataclass(frozen=True)
class TenantKey:
    id: str
    key: str
    org: str
    app: str
    limits: str | None = None  # key-level overrides, YAML flow text

    @staticmethod
    def new(id: str, org: str, app: str, limits: str | None = None) -> TenantKey:
        return TenantKey(id, generate_key(), org, app, limits)


def write_policy(
    path: Path,
    sims: Sequence[str],
    keys: Iterable[TenantKey],
    limits: str,
    org_limits: dict[str, str] | None = None,
    store: str = "memory",
    max_tokens_cap: int = 4096,
) -> Path:
    """A policy with one pool `sim` (alias `sim`) over `sims`; `limits` etc. are YAML flow text."""
    endpoints = ", ".join(f'"{u}"' for u in sims)
    lines = [
        "pools:",
        "  - name: sim",
        "    model: sim",
        f"    endpoints: {{static: [{endpoints}]}}",
        "    timeouts: {connect_s: 2, first_token_s: 20, total_s: 120}",
        "models:",
        f"  - {{name: sim, route: {{pool: sim}}, max_tokens: {{default: 64, cap: {max_tokens_cap}}}}}",
        f"limits: {limits}",
        "tenancy:",
        f"  store: {store}",
        "  keys:",
    ]
    for k in keys:
        own = f", limits: {k.limits}" if k.limits else ""
        lines.append(f"    - {{id: {k.id}, sha256: {hash_key(k.key)}, org: {k.org}, app: {k.app}{own}}}")
    if org_limits:
        lines.append("  orgs:")
        for org, lim in org_limits.items():
            lines.append(f"    - {{name: {org}, limits: {lim}}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def sim_tokens(sims: Sequence[str]) -> int:
    """prompt + generation tokens the simulators report, summed over all of them."""
    total = 0.0
    for url in sims:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        total += metric(text, "vllm:prompt_tokens_total") + metric(text, "vllm:generation_tokens_total")
    return int(total)


def base_key(level: str, scope: str, dim: str) -> str:
    return f"{PREFIX}:{level}:{scope}:{dim}"


def live_leases(r: redis.Redis) -> dict[str, int]:
    """Lease records and non-zero leased totals of every rule, all levels (ratelimit/keys.py layout)."""
    out: dict[str, int] = {}
    for rid, _expiry in r.zrange(f"{PREFIX}:leases", 0, -1, withscores=True):
        out[f"lease {rid.decode()}"] = 1
    for name, value in r.hgetall(f"{PREFIX}:lh").items():
        if name.startswith(b"@") or int(value):
            out[f"lh {name.decode()}"] = 1 if name.startswith(b"@") else int(value)
    return out


def sub_window_counters(r: redis.Redis, base: str) -> dict[int, int]:
    """Sub-window number -> settled usage, for the counters of `base` that still exist (the window's
    `t` and `h` fields are checked against them: `t` is their sum, `h` the newest)."""
    fields = {k.decode(): int(v) for k, v in r.hgetall(f"{base}:sw").items()}
    total, newest = fields.pop("t", 0), fields.pop("h", None)
    counters = {int(k): v for k, v in fields.items()}
    assert total == sum(counters.values()), (total, counters)
    assert newest == (max(counters) if counters else newest), (newest, counters)
    return counters


@dataclass
class StreamResult:
    status: int
    headers: httpx.Headers
    usage: dict[str, Any] | None = None
    chunks: int = 0
    body: bytes = b""
    extra: dict[str, Any] = field(default_factory=dict)


def chat_body(max_tokens: int, prompt: str = "Count to ten, please.", **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        **extra,
    }


async def stream_chat(client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]) -> StreamResult:
    """POST a streamed chat completion, read it to the end, keep the usage chunk."""
    headers = {"authorization": f"Bearer {key}"}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
        res = StreamResult(resp.status_code, resp.headers)
        if resp.status_code != 200:
            res.body = await resp.aread()
            return res
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = orjson.loads(line[6:])
            res.chunks += 1
            if obj.get("usage"):
                res.usage = obj["usage"]
    return res
