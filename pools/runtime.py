"""The running side of one pool: discovery and scraping tasks around a `ReplicaPool`.

Built by the gateway in its lifespan with the scrape's HTTP GET (`pools.scraper.Fetch`); `start` spawns
the tasks, `close` cancels them. After each scrape round the pool dispatches held requests, since
fresh load or an elapsed breaker timer may have made a replica eligible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from pools.discovery import Discovery
from pools.lora import listed_adapters
from pools.pool import ReplicaPool
from pools.replica import Replica
from pools.scraper import Fetch, Scraper

log = logging.getLogger(__name__)


class PoolRuntime:
    def __init__(
        self, pool: ReplicaPool, discovery: Discovery, scrape: bool = True, relist_s: float | None = None
    ) -> None:
        """`relist_s`: a LoRA pool whose adapters are loaded at run time re-reads each replica's
        `/v1/models` this often (what it serves after a restart, or after another gateway loaded)."""
        self.pool = pool
        self._discovery = discovery
        self._scrape = scrape
        self._relist_s = relist_s
        self._tasks: list[asyncio.Task[None]] = []

    def _update(self, bases: Sequence[str]) -> None:
        self.pool.set_members(bases)

    async def _scrape_forever(self, scraper: Scraper) -> None:
        interval = self.pool.balancing.scrape_interval_s
        while True:
            try:
                await scraper.scrape_all()
            except Exception:  # noqa: BLE001 - a scraper bug must not end scraping for good
                log.exception("pool %s: scrape round failed", self.pool.name)
            self.pool.dispatch()
            await asyncio.sleep(interval)

    def start(self, fetch: Fetch) -> None:
        self._tasks.append(asyncio.create_task(self._discovery.run(self._update)))
        if self._scrape:
            scraper = Scraper(
                lambda: self.pool.replicas,
                fetch,
                self.pool.balancing.scrape_interval_s,
                spec_window_s=self.pool.spec_window_s,
            )
            self._tasks.append(asyncio.create_task(self._scrape_forever(scraper)))
        else:
            self._tasks.append(asyncio.create_task(self._tick()))
        if self._relist_s is not None:
            self._tasks.append(asyncio.create_task(self._relist_forever(fetch, self._relist_s)))

    async def relist(self, fetch: Fetch, r: Replica, timeout: float) -> bool:
        """Re-read which adapters `r` serves; False when its answer could not be read."""
        state = r.adapters
        if state is None:
            return False
        asked = asyncio.get_running_loop().time()
        text = await fetch(r.base, "/v1/models", timeout)
        listed = listed_adapters(text) if text is not None else None
        if listed is None:
            return False
        state.relisted(listed, asked)
        return True

    async def _relist_forever(self, fetch: Fetch, every: float) -> None:
        while True:
            try:
                await asyncio.gather(*(self.relist(fetch, r, every) for r in list(self.pool.replicas)))
            except Exception:  # noqa: BLE001 - a lister bug must not end listing for good
                log.exception("pool %s: adapter listing failed", self.pool.name)
            await asyncio.sleep(every)

    async def _tick(self) -> None:
        # Without scraping, breaker timers still need a clock to wake held requests.
        while True:
            await asyncio.sleep(self.pool.balancing.scrape_interval_s)
            self.pool.dispatch()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
