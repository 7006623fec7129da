"""Explicit fail_open / fail_closed around a shared backend, with automatic recovery.

`FailoverLimiter(primary, local, mode)` sends every call to `primary` (Redis). When it raises
`BackendUnavailable` (any Redis error: an outage, out of memory, a wrong password, an ACL, a cluster
redirect, a script error), the call's failure mode decides: `Admission.on_backend_error` /
`Reservation.on_backend_error` (the gateway sets it per pool), else `mode`:
- fail_closed: the error propagates (the gateway answers 503), fast: while the primary is known down,
  calls fail immediately instead of each waiting for a socket timeout;
- fail_open: the decision comes from `local` (an in-process `MemoryBackend`, approximate: per replica)
  and is marked `Decision.degraded=True`. Top-ups too: a reservation Redis admitted is adopted by
  `local` (a lease of what it holds, no check) at its first top-up there, so the stream grows against
  the local view of the same rules instead of without bound; it is settled in both.

While down, one call per `probe_interval_s` tries the primary again (the probe); the first success
ends degraded mode, so exact limiting resumes by itself when Redis returns, without recreating anything.

A reservation is settled, topped up and renewed by the backend that made it (tracked by request id).
A settle the primary cannot take is retried in the background (`settle_retries` times, growing
backoff) and then dropped: its lease expires within `lease_s` anyway, so dropping leaks at most one lease.
Renewals that fail, for whatever reason, are counted and skipped (the next renewal round tries again):
`renew` never raises, so the gateway's renewal task cannot die of one bad answer.

`stats` holds plain counters for the gateway's Prometheus metrics, errors by (op, reason).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ratelimit.errors import BackendUnavailable, EveryMinute
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import (
    Admission,
    Decision,
    Dimension,
    Limiter,
    OnBackendError,
    Reservation,
    SettleFailed,
)

log = logging.getLogger("llmgw.ratelimit")


class Shared(Limiter, Protocol):
    """A shared backend (Redis): its queued settlements can fail after `settle_soon` returned, so it
    reports them to `failed`."""

    def settle_soon(
        self, reservation: Reservation, used: Mapping[Dimension, int], failed: SettleFailed | None = None
    ) -> None: ...


@dataclass(slots=True)
class FailoverStats:
    backend_errors: int = 0  # calls to the primary that failed (the sum of `errors`)
    errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (op, reason) -> failed calls
    fail_open_activations: int = 0  # transitions into degraded (local) mode
    degraded_decisions: int = 0  # admits / top-ups decided without the primary
    recoveries: int = 0  # transitions back to the primary
    settle_retries: int = 0  # background settle attempts after a failure
    settle_drops: int = 0  # settles given up after all retries (or at close)
    renew_failures: int = 0
    degraded: bool = False  # currently deciding locally / failing closed

    def count(self, op: str, reason: str) -> None:
        self.backend_errors += 1
        self.errors[(op, reason)] = self.errors.get((op, reason), 0) + 1


class FailoverLimiter:
    def __init__(
        self,
        primary: Shared,
        local: MemoryBackend,
        mode: OnBackendError,
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
        # Request ids admitted by the primary that `local` holds too (topped up there while it was down).
        self._adopted: set[str] = set()
        self._retries: set[asyncio.Task[None]] = set()
        self._settle_error: BackendUnavailable | None = None
        self._report = EveryMinute(log)
        self.stats = FailoverStats()

    def _use_primary(self, mode: OnBackendError, op: str) -> bool:
        """Ask the primary? False: decide locally (fail_open), while it is known down and this call is
        not the probe; fail_closed then raises at once instead."""
        if not self.stats.degraded:
            return True
        now = self._clock()
        if now >= self._next_probe:
            # This call is the probe; concurrent calls keep going local until it answers.
            self._next_probe = now + self._probe_interval
            return True
        if mode == "fail_closed":
            raise BackendUnavailable("shared limiter backend down (fail_closed)", op=op)
        return False

    def _down(self, error: BackendUnavailable, op: str, mode: OnBackendError) -> None:
        """A call the primary failed: counted; raised again under fail_closed."""
        self._failed(error, op, mode)
        if mode == "fail_closed":
            raise error

    def _failed(self, error: BackendUnavailable, op: str, mode: OnBackendError) -> None:
        self.stats.count(op, error.reason)
        self._next_probe = self._clock() + self._probe_interval
        if self.stats.degraded:
            self._report(error.reason, logging.WARNING, "rate limiter backend error during %s: %s", op, error)
            return
        self.stats.degraded = True
        self._report.mark(error.reason)
        if mode == "fail_open":
            self.stats.fail_open_activations += 1
            log.warning(
                "rate limiter backend unavailable (%s): fail_open, limiting locally and approximately "
                "(each replica enforces the whole limit) until it answers again",
                error,
            )
        else:
            log.error("rate limiter backend unavailable (%s): fail_closed, answering 503", error)

    def _unexpected(self, op: str, error: Exception) -> None:
        """Not a backend error (those are `BackendUnavailable`): a bug. Counted and logged; the caller
        carries on."""
        self.stats.count(op, "other")
        self._report(
            f"{op}:{type(error).__name__}",
            logging.ERROR,
            "rate limiter %s failed: %s: %s",
            op,
            type(error).__name__,
            error,
        )

    def _recovered(self) -> None:
        if self.stats.degraded:
            self.stats.degraded = False
            self.stats.recoveries += 1
            log.warning("rate limiter backend is back: exact limiting resumed")

    async def admit(self, admission: Admission) -> Decision:
        mode = admission.on_backend_error or self._mode
        if self._use_primary(mode, "admit"):
            try:
                decision = await self._primary.admit(admission)
            except BackendUnavailable as e:
                self._down(e, "admit", mode)
            else:
                self._recovered()
                if decision.reservation is not None:
                    decision.reservation.on_backend_error = admission.on_backend_error
                return decision
        self.stats.degraded_decisions += 1
        decision = await self._local.admit(admission)
        if decision.allowed:
            self._local_ids.add(admission.request_id)
        return replace(decision, degraded=True)

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        rid = reservation.request_id
        if rid in self._local_ids:
            return await self._local.top_up(reservation, extra)
        mode = reservation.on_backend_error or self._mode
        if self._use_primary(mode, "top_up"):
            try:
                granted = await self._primary.top_up(reservation, extra)
            except BackendUnavailable as e:
                self._down(e, "top_up", mode)
            else:
                self._recovered()
                return granted
        # fail_open: the stream grows against the local limiter's view of the same rules, holding there
        # what Redis granted it so far (Redis keeps its lease; settlement goes to both).
        self.stats.degraded_decisions += 1
        if rid not in self._adopted:
            self._adopted.add(rid)
            self._local.adopt(reservation)
        return await self._local.top_up(reservation, extra)

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        await self.settle_many(((reservation, used),))

    async def settle_many(self, items: Sequence[tuple[Reservation, Mapping[Dimension, int]]]) -> None:
        local = [(r, u) for r, u in items if r.request_id in self._local_ids or r.request_id in self._adopted]
        shared = [(r, u) for r, u in items if r.request_id not in self._local_ids]
        for reservation, _ in local:
            self._local_ids.discard(reservation.request_id)
            self._adopted.discard(reservation.request_id)
        if local:
            await self._local.settle_many(local)
        if not shared:
            return
        try:
            await self._primary.settle_many(shared)
        except BackendUnavailable as e:
            self._failed(e, "settle", self._mode)
            for reservation, used in shared:  # each retried on its own; a lease expires anyway
                self._retry_later(reservation, used)

    def settle_soon(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        rid = reservation.request_id
        if rid in self._local_ids:
            self._local_ids.discard(rid)
            self._local.settle_soon(reservation, used)
            return
        if self._adopted and rid in self._adopted:
            self._adopted.discard(rid)
            self._local.settle_soon(reservation, used)
        self._primary.settle_soon(reservation, used, self._settle_failed)

    def _settle_failed(
        self, reservation: Reservation, used: Mapping[Dimension, int], error: BackendUnavailable
    ) -> None:
        """A queued settlement the primary could not take: retried like a failed `settle_many`. (Every
        settlement of the failed call reports the same error: it is counted once.)"""
        if error is not self._settle_error:
            self._settle_error = error
            self.stats.count("settle", error.reason)
        self._retry_later(reservation, used)

    def _retry_later(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
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
                self._failed(e, "settle", self._mode)
            except Exception as e:  # noqa: BLE001 - a bug must not end in "Task exception never retrieved"
                self._unexpected("settle", e)
                break
            else:
                return
        self.stats.settle_drops += 1

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        """Never raises (but for cancellation): a failed renewal is counted, logged and retried next round."""
        local = [r for r in reservations if r.request_id in self._local_ids or r.request_id in self._adopted]
        shared = [r for r in reservations if r.request_id not in self._local_ids]
        try:
            if local:
                await self._local.renew(local)
            if shared:
                await self._primary.renew(shared)
        except BackendUnavailable as e:
            self._failed(e, "renew", self._mode)
            self.stats.renew_failures += 1
        except Exception as e:  # noqa: BLE001 - the renewal task must outlive any one bad answer
            self._unexpected("renew", e)
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
