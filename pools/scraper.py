"""Background scrape of every replica's /metrics into `Replica.load`.

The HTTP GET is a `Fetch` the gateway hands in: its lean HTTP/1.1 client for plain-HTTP replicas
(httpx costs ~0.8 ms of the event loop per scrape, and every replica is scraped every
`scrape_interval_s`, on the same core that relays requests), httpx (`httpx_fetch`) otherwise.

One task per pool; each round fetches all current replicas concurrently with a timeout of one
interval, so one hung replica never delays the others' data. A failed scrape leaves the old load
in place: it ages out through `stale_after_s` and the picker falls back to the in-flight count.
Scrape failures never feed the circuit breaker: /metrics can be down while serving works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from pools.replica import Replica
from pools.vllm_metrics import parse_load

# (base URL, path, timeout s) -> the body of a 200 answer, or None for any failure or other status.
Fetch = Callable[[str, str, float], Awaitable[str | None]]


def httpx_fetch(client: httpx.AsyncClient) -> Fetch:
    async def fetch(base: str, path: str, timeout: float) -> str | None:
        try:
            resp = await client.get(base + path, timeout=timeout)
        except (httpx.HTTPError, OSError):
            return None
        return resp.text if resp.status_code == 200 else None

    return fetch


class Scraper:
    def __init__(
        self,
        replicas: Callable[[], Sequence[Replica]],
        fetch: Fetch,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        path: str = "/metrics",
    ) -> None:
        self._replicas = replicas
        self._fetch = fetch
        self._interval = interval_s
        self._clock = clock
        self._path = path

    async def scrape(self, r: Replica) -> None:
        text = await self._fetch(r.base, self._path, self._interval)
        if text is None:
            r.scrape_failures += 1
            return
        load = parse_load(text, self._clock())
        if load is not None:
            r.load = load

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self.scrape(r) for r in self._replicas()))
