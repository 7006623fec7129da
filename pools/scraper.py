"""Background scrape of every replica's /metrics into `Replica.load`.

The HTTP GET is a `Fetch` the gateway hands in: its lean HTTP/1.1 client for plain-HTTP replicas
(httpx costs ~0.8 ms of the event loop per scrape, and every replica is scraped every
`scrape_interval_s`, on the same core that relays requests), httpx (`httpx_fetch`) otherwise.

One task per pool; each round fetches all current replicas concurrently with a timeout of one
interval, so one hung replica never delays the others' data. A failed scrape leaves the old load
in place: it ages out through `stale_after_s` and the picker falls back to the in-flight count.
Scrape failures never feed the circuit breaker: /metrics can be down while serving works.
Spec-decode counters (a speculative replica) are also appended to the replica's `SpecHistory`, kept
for `spec_window_s`: the window its acceptance figures are computed over (`pools.spec_decode`);
TPOT and running batch feed the replica's `TpotCurve` (`pools.tpot_curve`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from pools.replica import Replica
from pools.spec_decode import DEFAULT_WINDOW_S
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
        spec_window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        self._replicas = replicas
        self._fetch = fetch
        self._interval = interval_s
        self._clock = clock
        self._path = path
        self._spec_window = spec_window_s

    async def scrape(self, r: Replica) -> None:
        text = await self._fetch(r.base, self._path, self._interval)
        if text is None:
            r.scrape_failures += 1
            return
        load = parse_load(text, self._clock())
        if load is not None:
            r.load = load
            if load.spec is not None:
                r.spec.add(load.at, load.spec, self._spec_window)
            r.tpot.observe_scrape(load.running, load.tpot_sum, load.tpot_count)
            if r.adapters is not None:
                r.adapters.scraped = load.lora

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self.scrape(r) for r in self._replicas()))
