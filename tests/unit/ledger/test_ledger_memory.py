"""The Ledger's buffer and flush on a MemorySpool (no Redis, no database): rows reach the spool in order, a
spool that fails or is full keeps them in memory, and the in-process bound is counted when it bites."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from gateway.ledger.config import LedgerConfig
from gateway.ledger.model import SpendRow
from gateway.ledger.spool import MemorySpool, SpoolUnavailable
from gateway.ledger.writer import Ledger
from tests.support.poll import wait_until_async


def row(i: int) -> SpendRow:
    return SpendRow(f"r{i}", 1_796_670_630.0 + i, "acme", "web", "k1", (), None, "small", "small", None, None,
                    10, 20, 0, 7, 200, False)  # fmt: skip


class FlakySpool(MemorySpool):
    """A MemorySpool that is unreachable while `down` is set."""

    down = False

    async def append(self, rows: Sequence[SpendRow]) -> int:
        if self.down:
            raise SpoolUnavailable("down")
        return await super().append(rows)


async def _ids(spool: MemorySpool) -> list[str]:
    entries = await spool.read(10_000)
    await spool.ack([e.id for e in entries])
    return [e.row.request_id for e in entries if e.row is not None]


async def test_memory_spool_gives_unacknowledged_entries_again() -> None:
    spool = MemorySpool(max_rows=3)
    a, b, c, d = (row(i) for i in range(4))
    assert await spool.append([a, b, c, d]) == 3  # the bound
    first = await spool.read(2)
    assert [e.row for e in first] == [a, b]
    assert [e.row for e in await spool.read(2)] == [a, b]  # not acknowledged: again
    await spool.ack([first[0].id])
    assert await spool.length() == 2
    assert [e.row for e in await spool.read(5)] == [b]
    await spool.ack([first[1].id])
    assert [e.row for e in await spool.read(5)] == [c]


async def test_rows_reach_the_spool_in_order_and_close_flushes_the_rest() -> None:
    spool = MemorySpool()
    registry = CollectorRegistry()
    ledger = Ledger(LedgerConfig(flush_ms=10), spool, None, registry)
    await ledger.start()
    for i in range(100):
        ledger.record(row(i))
    await wait_until_async(lambda: ledger.stats.spooled == 100, "the flush", timeout=5)
    for i in range(100, 150):
        ledger.record(row(i))
    await ledger.close()
    assert await _ids(spool) == [f"r{i}" for i in range(150)]
    assert ledger.stats.spooled == 150 and ledger.stats.dropped == 0
    assert registry.get_sample_value("llmgw_ledger_rows_total", {"outcome": "spooled"}) == 150
    assert registry.get_sample_value("llmgw_ledger_rows_total", {"outcome": "dropped"}) == 0


async def test_an_unreachable_spool_keeps_the_rows_in_memory() -> None:
    spool = FlakySpool()
    spool.down = True
    ledger = Ledger(LedgerConfig(flush_ms=10), spool, None, CollectorRegistry())
    await ledger.start()
    for i in range(30):
        ledger.record(row(i))
    await wait_until_async(lambda: ledger.stats.buffered == 30, "the rows", timeout=5)
    await wait_until_async(
        lambda: ledger.stats.buffered == 30 and ledger.stats.spooled == 0, "a failed flush", timeout=5
    )
    spool.down = False
    await wait_until_async(lambda: ledger.stats.spooled == 30, "the retried flush", timeout=5)
    await ledger.close()
    assert await _ids(spool) == [f"r{i}" for i in range(30)]
    assert ledger.stats.dropped == 0


async def test_a_full_spool_leaves_the_rest_in_memory_until_there_is_room() -> None:
    spool = MemorySpool(max_rows=10)
    ledger = Ledger(LedgerConfig(flush_ms=10, batch_rows=5), spool, None, CollectorRegistry())
    await ledger.start()
    for i in range(25):
        ledger.record(row(i))
    await wait_until_async(lambda: ledger.stats.spooled == 10, "the spool to fill", timeout=5)
    assert ledger.stats.buffered == 15 and ledger.stats.dropped == 0  # never trimmed
    got = await _ids(spool)  # a drainer makes room
    await wait_until_async(lambda: ledger.stats.spooled == 20, "the next rows", timeout=5)
    got += await _ids(spool)
    await wait_until_async(lambda: ledger.stats.spooled == 25, "the last rows", timeout=5)
    await ledger.close()
    got += await _ids(spool)
    assert got == [f"r{i}" for i in range(25)]


async def test_rows_beyond_the_memory_bound_are_counted_as_dropped() -> None:
    # The one place a row is lost on purpose: the spool unreachable and memory full. It must be counted.
    spool = FlakySpool()
    spool.down = True
    registry = CollectorRegistry()
    ledger = Ledger(LedgerConfig(flush_ms=10, memory_rows=20, batch_rows=5), spool, None, registry)
    for i in range(25):
        ledger.record(row(i))  # before start: record needs no task
    assert ledger.stats.buffered == 20 and ledger.stats.dropped == 5
    await ledger.start()
    await wait_until_async(
        lambda: registry.get_sample_value("llmgw_ledger_rows_total", {"outcome": "dropped"}) == 5,
        "the count",
        timeout=5,
    )
    await ledger.close()  # the spool still down: what memory held is lost too, and counted
    assert ledger.stats.dropped == 25
    assert registry.get_sample_value("llmgw_ledger_rows_total", {"outcome": "dropped"}) == 25
