"""The ledger of one replica: rows recorded on the hot path reach PostgreSQL through the spool.

    record(row)    on the event loop, per finished request: a length check and a deque append
    flush task     every `flush_ms`: the buffered rows appended to the spool (in chunks); the
                   spool unreachable or full: they stay in memory (bounded by `memory_rows`; rows recorded
                   beyond it are dropped and counted) and go with the next flush
    drainer task   read up to `batch_rows` from the spool, write them (idempotent), acknowledge them;
                   PostgreSQL failing: back off 0.2 s doubling to 5 s and read the same batch again (it
                   stays in the spool meanwhile, so nothing is lost while the spool has room); also the
                   schema migrations before the first write (`migrate_on_start`) and retention: one
                   replica a minute deletes at most `retention_batch` rows older than `retention_days`

Every replica runs both tasks; the spool's consumer group shares the rows between the drainers. A row is
written at least once (a replica dying between the write and the acknowledgement leaves its batch to be
claimed and written again) and kept once (its request id is the primary key).

`close()` stops both tasks, hands what is in memory to the spool and drains what it can for ~2 s; rows
still in memory then (the spool unreachable) are counted as dropped.

Metrics (on the registry given): `llmgw_ledger_rows_total{outcome=spooled|written|dropped}`,
`llmgw_ledger_backlog_rows` (the spool's length), `llmgw_ledger_write_errors_total`,
`llmgw_ledger_last_write_timestamp_seconds`. No lock on the hot path: `record` counts drops in a plain
integer that the flush task adds to the counter.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.ledger.config import LedgerConfig
from gateway.ledger.model import SpendRow
from gateway.ledger.spool import Spool, SpoolUnavailable
from gateway.ledger.store import SpendStore

__all__ = ["Ledger", "LedgerMetrics", "LedgerStats"]

log = logging.getLogger("llmgw.ledger")
T = TypeVar("T")

BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0
APPEND_CHUNK = 5_000  # rows per spool append (one pipeline): a backlog in memory goes out in steps
BACKLOG_EVERY_S = 1.0  # how often the backlog gauge reads the spool's length
RETENTION_EVERY_S = 60.0
RETENTION_BATCH = 5_000  # rows deleted per turn: a bounded delete, never a long lock on the table
CLOSE_TIMEOUT_S = 2.0
_LOG_EVERY_S = 60.0  # a failure that goes on is logged again this often


@dataclass(frozen=True, slots=True)
class LedgerStats:
    spooled: int  # rows handed to the spool
    written: int  # rows confirmed in PostgreSQL (a retried row counts again; the table keeps it once)
    dropped: int  # rows lost: memory full, a row that does not decode, rows left in memory at close
    backlog: int  # the spool's length when last read
    buffered: int  # rows in this replica's memory, waiting for the spool
    write_errors: int


class LedgerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rows = Counter(
            "llmgw_ledger_rows",
            "Spend ledger rows by outcome: spooled (handed to the spool), written (in PostgreSQL), "
            "dropped (lost)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("spooled", "written", "dropped"):
            self.rows.labels(outcome)
        self.backlog = Gauge(
            "llmgw_ledger_backlog_rows",
            "Rows in the ledger's spool waiting for PostgreSQL",
            registry=registry,
        )
        self.write_errors = Counter(
            "llmgw_ledger_write_errors",
            "Failed writes of a batch of ledger rows to PostgreSQL",
            registry=registry,
        )
        self.last_write = Gauge(
            "llmgw_ledger_last_write_timestamp_seconds",
            "Unix time of this replica's last successful write of ledger rows",
            registry=registry,
        )


class _Health:
    """Log a dependency's failures once when they start, every minute while they last, and the recovery."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.since: float | None = None
        self._logged = 0.0

    def failed(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since, self._logged = now, now
            log.warning("ledger: %s failed, retrying: %s", self.what, error)
        elif now - self._logged >= _LOG_EVERY_S:
            self._logged = now
            log.warning("ledger: %s still failing after %.0f s: %s", self.what, now - self.since, error)

    def ok(self) -> None:
        if self.since is not None:
            log.info("ledger: %s works again after %.1f s", self.what, time.monotonic() - self.since)
            self.since = None


class Ledger:
    def __init__(
        self,
        config: LedgerConfig,
        spool: Spool,
        store: SpendStore | None,
        registry: CollectorRegistry,
        key_prefix: str = "llmgw",
        *,
        retention_every_s: float = RETENTION_EVERY_S,
        retention_batch: int = RETENTION_BATCH,
    ) -> None:
        self.config = config
        # Not used for keys: the spool names its own (RedisSpool's key_prefix). Kept as the deployment's name.
        self.key_prefix = key_prefix
        self._spool = spool
        self._store = store
        self._metrics = LedgerMetrics(registry)
        self._buffer: deque[SpendRow] = deque()
        self._memory_rows = config.memory_rows
        self._flush_s = config.flush_ms / 1000
        self._retention_every_s = retention_every_s
        self._retention_batch = retention_batch
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._migrated = not config.migrate_on_start
        self._next_retention = 0.0
        self._next_backlog = 0.0
        self._spool_health = _Health("the spool")
        self._store_health = _Health("the database")
        # Counts: plain integers (the hot path's `_overflow` too), added to the counters by the tasks.
        self._overflow = 0
        self._overflow_counted = 0
        self._spooled = 0
        self._written = 0
        self._dropped = 0
        self._write_errors = 0
        self._backlog = 0

    # -- the hot path -----------------------------------------------------------------------------------

    def record(self, row: SpendRow) -> None:
        """Queue one finished request's row (O(1), no I/O, never raises)."""
        if len(self._buffer) < self._memory_rows:
            self._buffer.append(row)
        else:
            self._overflow += 1

    # -- life cycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        self._stop.clear()
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="ledger-flush"))
        if self._store is not None:
            self._tasks.append(asyncio.create_task(self._drain_loop(), name="ledger-drain"))

    async def close(self) -> None:
        self._stop.set()
        tasks, self._tasks = self._tasks, []
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        if tasks:
            # Each loop ends after its current step (a batch being written is finished and acknowledged).
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S / 2)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        while self._buffer and time.monotonic() < deadline:
            before = len(self._buffer)
            if not await self._within(self._flush(), deadline) or len(self._buffer) == before:
                break  # the spool is unreachable or full: no use trying again before the deadline
        if self._store is not None:
            while time.monotonic() < deadline:
                drained = await self._within(self._drain_step(), deadline)
                if not drained:  # nothing left, a failure, or out of time
                    break
        lost = len(self._buffer)
        if lost:
            self._buffer.clear()
            self._drop(lost)
            log.error("ledger: %d rows could not reach the spool before shutdown: lost", lost)
        self._count_overflow()

    @property
    def stats(self) -> LedgerStats:
        return LedgerStats(
            spooled=self._spooled,
            written=self._written,
            dropped=self._dropped + (self._overflow - self._overflow_counted),
            backlog=self._backlog,
            buffered=len(self._buffer),
            write_errors=self._write_errors,
        )

    # -- memory -> spool --------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while not self._stop.is_set():
            await self._sleep(self._flush_s)
            await self._flush()
            await self._read_backlog()

    async def _flush(self) -> bool:
        """Hand the buffered rows to the spool; False when it failed (the rows stay in memory)."""
        self._count_overflow()
        buf = self._buffer
        while buf:
            # The oldest rows, left in place until the spool has them (`record` appends on the right).
            rows = list(itertools.islice(buf, APPEND_CHUNK))
            try:
                accepted = await self._spool.append(rows)
            except SpoolUnavailable as e:
                self._spool_health.failed(e)
                return False
            except Exception as e:  # a bug must not end the task: log it, keep the rows
                log.exception("ledger: appending to the spool failed")
                self._spool_health.failed(e)
                return False
            for _ in range(accepted):
                buf.popleft()
            self._spooled += accepted
            self._metrics.rows.labels("spooled").inc(accepted)
            if accepted < len(rows):
                # Full: the rest waits in memory (bounded) for the drainers to make room.
                self._spool_health.failed(
                    SpoolUnavailable(
                        f"the spool is full, or Redis near its maxmemory ({len(buf)} rows wait in memory)"
                    )
                )
                return True
            self._spool_health.ok()
        return True

    # -- spool -> PostgreSQL ----------------------------------------------------------------------------

    async def _drain_loop(self) -> None:
        delay = BACKOFF_MIN_S
        while not self._stop.is_set():
            try:
                drained = await self._drain_step()
            except Exception:  # a bug must not end the task
                log.exception("ledger: drainer step failed")
                drained = None
            if drained is None:  # failed: back off
                await self._sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            delay = BACKOFF_MIN_S
            await self._retention()
            if not drained:
                await self._sleep(self._flush_s)

    async def _drain_step(self) -> int | None:
        """Write one batch from the spool: the number of entries, 0 when empty, None after a failure."""
        assert self._store is not None
        store = self._store
        if not self._migrated:
            try:
                applied = await store.migrate()
            except Exception as e:
                self._store_health.failed(e)
                return None
            if applied:
                log.info("ledger: applied migrations %s", ", ".join(applied))
            self._migrated = True
        try:
            entries = await self._spool.read(self.config.batch_rows)
        except SpoolUnavailable as e:
            self._spool_health.failed(e)
            return None
        if not entries:
            return 0
        rows: list[SpendRow] = []
        bad = 0
        for entry in entries:
            if entry.row is not None:
                rows.append(entry.row)
            elif entry.error is not None:
                bad += 1
                log.error("ledger: spool entry %s is not a spend row, dropped: %s", entry.id, entry.error)
        try:
            await store.write(rows)
        except Exception as e:  # asyncpg's errors, OSError, timeouts: all mean "not written, try again"
            self._write_errors += 1
            self._metrics.write_errors.inc()
            self._store_health.failed(e)
            return None
        self._store_health.ok()
        try:
            await self._spool.ack([e.id for e in entries])
        except SpoolUnavailable as e:
            # Written but not acknowledged: read and written again later, a no-op in PostgreSQL.
            self._spool_health.failed(e)
            return None
        self._spool_health.ok()
        self._written += len(rows)
        self._metrics.rows.labels("written").inc(len(rows))
        self._metrics.last_write.set(time.time())
        if bad:
            self._drop(bad)
        return len(entries)

    async def _read_backlog(self) -> None:
        now = time.monotonic()
        if now < self._next_backlog:
            return
        self._next_backlog = now + BACKLOG_EVERY_S
        try:
            self._backlog = await self._spool.length()
        except Exception:
            return  # the flushes and the drainer's reads report the spool's failures
        self._metrics.backlog.set(self._backlog)

    async def _retention(self) -> None:
        now = time.monotonic()
        if now >= self._next_retention and self._store is not None:
            self._next_retention = now + self._retention_every_s
            try:
                if await self._store.retention_turn(self._retention_every_s):
                    deleted = await self._store.delete_older_than(
                        self.config.retention_days, self._retention_batch
                    )
                    if deleted:
                        log.info("ledger: retention deleted %d rows older than %d days", deleted,
                                 self.config.retention_days)  # fmt: skip
            except Exception as e:
                log.warning("ledger: retention failed, next try in %.0f s: %s", self._retention_every_s, e)

    # -- helpers ----------------------------------------------------------------------------------------

    def _drop(self, n: int) -> None:
        self._dropped += n
        self._metrics.rows.labels("dropped").inc(n)

    def _count_overflow(self) -> None:
        new = self._overflow - self._overflow_counted
        if new:
            self._overflow_counted += new
            self._drop(new)
            log.error("ledger: in-process buffer full (%d rows): %d rows dropped", self._memory_rows, new)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, waking at once when the ledger is closing."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _within(self, step: Awaitable[T], deadline: float) -> T | None:
        try:
            return await asyncio.wait_for(step, max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            return None
