"""One replica of a pool as plain data: its address, the gateway's own counts, the scraped load.

The relay mutates `inflight` and the breaker through `ReplicaPool`; the scraper replaces `load`;
the picker only reads. A replica removed by discovery stays alive for the requests still holding it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from pools.breaker import Breaker
from pools.lora import Adapters, LoraInfo
from pools.spec_decode import SpecCounters, SpecHistory
from pools.tpot_curve import TpotCurve


@dataclass(frozen=True, slots=True)
class Load:
    """What one scrape of the replica's vLLM /metrics said (sums over engines)."""

    waiting: float
    running: float
    kv_usage: float  # 0..1
    prefix_queries: float  # tokens, cumulative
    prefix_hits: float  # tokens, cumulative
    at: float  # monotonic time of the scrape
    spec: SpecCounters | None = None  # spec-decode counters, cumulative; None without speculation
    tpot_sum: float = 0.0  # vllm:request_time_per_output_token_seconds_sum, cumulative
    tpot_count: float = 0.0  # its _count
    lora: LoraInfo | None = None  # vllm:lora_requests_info; None when the engine serves no adapters


def salt_of(base: str) -> int:
    """A stable 64-bit identity for rendezvous hashing (same on every gateway replica)."""
    return int.from_bytes(hashlib.blake2b(base.encode(), digest_size=8).digest(), "big")


@dataclass(slots=True, eq=False)
class Replica:
    base: str
    breaker: Breaker
    salt: int = 0
    inflight: int = 0
    load: Load | None = None
    ttft_ewma: float = 0.0  # seconds, this gateway's view
    picks: int = 0
    failures: int = 0
    scrape_failures: int = 0
    plain_http: bool = False  # http:// (not TLS): the relay's lean HTTP/1.1 client may call it
    spec: SpecHistory = field(default_factory=SpecHistory)  # scraped spec-decode samples (a window's)
    tpot: TpotCurve = field(default_factory=TpotCurve)  # scraped TPOT vs running batch
    adapters: Adapters | None = None  # a LoRA pool's replica: its adapters as the gateway knows them
    _urls: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base = self.base.rstrip("/")
        self.salt = salt_of(self.base)
        self.plain_http = self.base.startswith("http://")

    def url(self, path: str) -> str:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = self.base + path
        return url

    def fresh_load(self, now: float, stale_after: float) -> Load | None:
        load = self.load
        return load if load is not None and now - load.at <= stale_after else None

    def observe_ttft(self, seconds: float) -> None:
        # EWMA over ~10 requests: recent enough to show a slowing replica, smooth enough to ignore one.
        self.ttft_ewma = seconds if self.ttft_ewma == 0.0 else 0.9 * self.ttft_ewma + 0.1 * seconds
