"""Background scrape of every replica's /metrics into `Replica.load` (httpx: control plane).

One task per pool; each round fetches all current replicas concurrently with a timeout of one
interval, so one hung replica never delays the others' data. A failed scrape leaves the old load
in place: it ages out through `stale_after_s` and the picker falls back to the in-flight count.
Scrape failures never feed the circuit breaker: /metrics can be down while serving works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import httpx

from pools.replica import Replica
from pools.vllm_metrics import parse_load


class Scraper:
    def __init__(
        self,
        replicas: Callable[[], Sequence[Replica]],
        client: httpx.AsyncClient,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        path: str = "/metrics",
    ) -> None:
        self._replicas = replicas
        self._client = client
        self._interval = interval_s
        self._clock = clock
        self._path = path

    async def scrape(self, r: Replica) -> None:
        try:
            resp = await self._client.get(r.base + self._path, timeout=self._interval)
            if resp.status_code != 200:
                r.scrape_failures += 1
                return
            load = parse_load(resp.text, self._clock())
        except (httpx.HTTPError, OSError):
            r.scrape_failures += 1
            return
        if load is not None:
            r.load = load

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self.scrape(r) for r in self._replicas()))
