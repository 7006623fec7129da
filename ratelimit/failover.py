"""Explicit fail_open / fail_closed around a shared backend, with automatic recovery.

`FailoverLimiter(primary, local, mode)` sends every call to `primary` (Redis). When it raises
`BackendUnavailable`:
- fail_closed: the error propagates (the gateway answers 503), fast: while the primary is known down,
  calls fail immediately instead of each waiting for a socket timeout;
- fail_open: the decision comes from `local` (an in-process `MemoryBackend`, approximate: per replica)
  and is marked `Decision.degraded=True`.

While down, one call per `probe_interval_s` tries the primary again (the probe); the first success
ends degraded mode, so exact limiting resumes by itself when Redis returns, without recreating anything.

A reservation is settled, topped up and renewed by the backend that made it (tracked by request id).
A settle the primary cannot take is retried in the background (`settle_retries` times, growing
backoff) and then dropped: its lease expires within `lease_s` anyway, so dropping leaks at most one lease.
Renewals that fail are counted and skipped (the next renewal round tries again).

`stats` holds plain counters for the gateway's Prometheus metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from ratelimit.errors import BackendUnavailable
from ratelimit.model import Admission, Decision, Dimension, Limiter, Reservation, SettleFailed

log = logging.getLogger("llmgw.ratelimit")


class Shared(Limiter, Protocol):
    """A shared backend (Redis): its queued settlements can fail after `settle_soon` returned, so it
    reports them to `failed`."""

    def settle_soon(
        self, reservation: Reservation, used: Mapping[Dimension, int], failed: SettleFailed | None = None
    ) -> None: ...


@dataclass(slots=True)
class FailoverStats:
    backend_errors: int = 0  # calls to the primary that raised BackendUnavailable
    fail_open_activations: int = 0  # transitions into degraded (local) mode
    degraded_decisions: int = 0  # admits / top-ups decided without the primary
    recoveries: int = 0  # transitions back to the primary
    settle_retries: int = 0  # background settle attempts after a failure
    settle_drops: int = 0  # settles given up after all retries (or at close)
    renew_failures: int = 0
    degraded: bool = False  # currently deciding locally / failing closed


class FailoverLimiter:
    def __init__(
        self,
        primary: Shared,
        local: Limiter,
        mode: Literal["fail_open", "fail_closed"],
        *,
        probe_interval_s: float = 1.0,
        settle_retries: int = 3,
        settle_backoff_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._primary = primary
        self._local = local
        self._mode = mode
        self._probe_interval = probe_interval_s
        self._settle_retries = settle_retries
        self._settle_backoff = settle_backoff_s
        self._clock = clock
        self._next_probe = 0.0
        # Request ids admitted by `local`; removed at settle (the gateway settles every admitted request).
        self._local_ids: set[str] = set()
        self._retries: set[asyncio.Task[None]] = set()
        self.stats = FailoverStats()

    def _use_primary(self) -> bool:
        if not self.stats.degraded:
            return True
        now = self._clock()
        if now < self._next_probe:
            return False
        # This call is the probe; concurrent calls keep going local until it answers.
        self._next_probe = now + self._probe_interval
        return True

    def _failed(self, error: BackendUnavailable) -> None:
        self.stats.backend_errors += 1
        self._next_probe = self._clock() + self._probe_interval
        if not self.stats.degraded:
            self.stats.degraded = True
            if self._mode == "fail_open":
                self.stats.fail_open_activations += 1
                log.warning(
                    "rate limiter backend unavailable (%s): fail_open, limiting locally and approximately "
                    "(each replica enforces the whole limit) until it answers again",
                    error,
                )
            else:
                log.error("rate limiter backend unavailable (%s): fail_closed, answering 503", error)

    def _recovered(self) -> None:
        if self.stats.degraded:
            self.stats.degraded = False
            self.stats.recoveries += 1
            log.warning("rate limiter backend is back: exact limiting resumed")

    async def admit(self, admission: Admission) -> Decision:
        if self._use_primary():
            try:
                decision = await self._primary.admit(admission)
            except BackendUnavailable as e:
                self._failed(e)
                if self._mode == "fail_closed":
                    raise
            else:
                self._recovered()
                return decision
        elif self._mode == "fail_closed":
            raise BackendUnavailable("shared limiter backend down (fail_closed)")
        self.stats.degraded_decisions += 1
        decision = await self._local.admit(admission)
        if decision.allowed:
            self._local_ids.add(admission.request_id)
        return replace(decision, degraded=True)

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        if reservation.request_id in self._local_ids:
            return await self._local.top_up(reservation, extra)
        try:
            return await self._primary.top_up(reservation, extra)
        except BackendUnavailable as e:
            self._failed(e)
            if self._mode == "fail_closed":
                raise
        # fail_open: the stream goes on unlimited rather than being cut by an outage. `reserved` is left
        # as Redis holds it: it names the reservation's leases there, which settlement must find.
        self.stats.degraded_decisions += 1
        return True

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        await self.settle_many(((reservation, used),))

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        local = [(r, u) for r, u in items if r.request_id in self._local_ids]
        shared = [(r, u) for r, u in items if r.request_id not in self._local_ids]
        for reservation, _ in local:
            self._local_ids.discard(reservation.request_id)
        if local:
            await self._local.settle_many(local)
        if not shared:
            return
        try:
            await self._primary.settle_many(shared)
        except BackendUnavailable as e:
            self._failed(e)
            for reservation, used in shared:  # each retried on its own; a lease expires anyway
                task = asyncio.create_task(self._retry_settle(reservation, dict(used)))
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)

    def settle_soon(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        if reservation.request_id in self._local_ids:
            self._local_ids.discard(reservation.request_id)
            self._local.settle_soon(reservation, used)
        else:
            self._primary.settle_soon(reservation, used, self._settle_failed)

    def _settle_failed(
        self, reservation: Reservation, used: Mapping[Dimension, int], error: BackendUnavailable
    ) -> None:
        """A queued settlement the primary could not take: retried like a failed `settle_many`."""
        task = asyncio.create_task(self._retry_settle(reservation, dict(used)))
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def flush(self) -> None:
        await self._primary.flush()
        await self._local.flush()

    async def _retry_settle(self, reservation: Reservation, used: dict[Dimension, int]) -> None:
        delay = self._settle_backoff
        for _ in range(self._settle_retries):
            await asyncio.sleep(delay)
            delay *= 2
            self.stats.settle_retries += 1
            try:
                await self._primary.settle(reservation, used)
            except BackendUnavailable as e:
                self._failed(e)
            else:
                return
        self.stats.settle_drops += 1

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        local = [r for r in reservations if r.request_id in self._local_ids]
        shared = [r for r in reservations if r.request_id not in self._local_ids]
        if local:
            await self._local.renew(local)
        if shared:
            try:
                await self._primary.renew(shared)
            except BackendUnavailable as e:
                self._failed(e)
                self.stats.renew_failures += 1

    @property
    def pending_settles(self) -> int:
        return len(self._retries)

    async def close(self) -> None:
        for task in list(self._retries):
            task.cancel()
        if self._retries:
            self.stats.settle_drops += len(self._retries)
            await asyncio.gather(*self._retries, return_exceptions=True)
        await self._primary.close()
        await self._local.close()
