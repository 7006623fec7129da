"""Closed-loop latency batches that also time the first SSE event (TTFT), on the overhead client.

The raw keep-alive client of eval/bench/overhead/client.py is reused as is; a subclass notes when the first
`data:` bytes of a response arrive. A batch runs for a fixed time rather than a fixed count, so the
slowest peer (LiteLLM, ~100x slower than the floor) does not stretch a round to minutes; its cells
simply hold fewer samples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eval.bench.overhead.client import HTTPError, _ClientConn, close_all, count_sse_events, open_conns_as
from eval.bench.overhead.report import percentile, summarize_ns

REQUEST_TIMEOUT_S = 30.0


class _TimedConn(_ClientConn):
    def __init__(self) -> None:
        super().__init__()
        self.first_event_ns = 0

    def request(self, raw: bytes) -> asyncio.Future[tuple[int, bytes]]:
        self.first_event_ns = 0
        return super().request(raw)

    def data_received(self, data: bytes) -> None:
        # Loopback delivers an SSE event in one read; a `data:` split across two reads would only
        # make TTFT later by one read, on every side alike.
        if not self.first_event_ns and b"data:" in data:
            self.first_event_ns = time.perf_counter_ns()
        super().data_received(data)


@dataclass(slots=True)
class Cell:
    """One (side, mode, concurrency) batch of one round."""

    total_ns: list[int] = field(default_factory=list)
    ttft_ns: list[int] = field(default_factory=list)
    events: int = 0
    errors: int = 0
    first_error: str = ""

    def summary(self, stream: bool) -> dict[str, Any]:
        out: dict[str, Any] = dict(summarize_ns(self.total_ns))
        out["errors"] = self.errors
        if self.first_error:
            out["first_error"] = self.first_error
        if stream and self.ttft_ns:
            ms = sorted(t / 1e6 for t in self.ttft_ns)
            out["ttft_p50_ms"] = round(percentile(ms, 50), 4)
            out["ttft_p99_ms"] = round(percentile(ms, 99), 4)
            out["events_mean"] = round(self.events / len(self.total_ns), 2)
        return out


async def _loop(
    conn: _TimedConn, make: Callable[[], bytes], deadline: float, stream: bool, out: Cell
) -> None:
    clock = time.perf_counter_ns
    while time.perf_counter() < deadline:
        raw = make()
        t0 = clock()
        try:
            status, body = await asyncio.wait_for(conn.request(raw), REQUEST_TIMEOUT_S)
        except (HTTPError, TimeoutError) as exc:
            out.errors += 1
            out.first_error = out.first_error or f"{type(exc).__name__}: {exc}"
            return  # the connection is unusable now
        t1 = clock()
        if status != 200:
            out.errors += 1
            out.first_error = out.first_error or f"HTTP {status}: {body[:200]!r}"
            continue
        out.total_ns.append(t1 - t0)
        if stream:
            out.ttft_ns.append((conn.first_event_ns or t1) - t0)
            out.events += count_sse_events(body)


async def timed_batch(
    port: int, make: Callable[[], bytes], concurrency: int, seconds: float, stream: bool
) -> Cell:
    """`concurrency` connections, each a closed loop (send, wait, send) for `seconds`; `make` gives the
    bytes of each request (built before its clock starts)."""
    conns = await open_conns_as(_TimedConn, port, concurrency)
    out = Cell()
    deadline = time.perf_counter() + seconds
    try:
        await asyncio.gather(*(_loop(c, make, deadline, stream, out) for c in conns))
    finally:
        close_all(conns)
    return out
