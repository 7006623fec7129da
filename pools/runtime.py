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
from pools.pool import ReplicaPool
from pools.scraper import Fetch, Scraper

log = logging.getLogger(__name__)


class PoolRuntime:
    def __init__(self, pool: ReplicaPool, discovery: Discovery, scrape: bool = True) -> None:
        self.pool = pool
        self._discovery = discovery
        self._scrape = scrape
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
            scraper = Scraper(lambda: self.pool.replicas, fetch, self.pool.balancing.scrape_interval_s)
            self._tasks.append(asyncio.create_task(self._scrape_forever(scraper)))
        else:
            self._tasks.append(asyncio.create_task(self._tick()))

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
