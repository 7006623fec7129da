"""Drive the engine in real time and hand tokens to the waiting HTTP handlers.

One asyncio task loops: take a step at `loop.time()`, sleep for its duration (the step's tokens become
visible at the step's end), then wake the waiters of every sequence that progressed. A request's handler
owns one `Waiter` shared by its choices; it re-arms a future and awaits it, so delivery is push-based,
with no polling. When nothing is queued the task parks on an event that `submit` sets.
"""

from __future__ import annotations

import asyncio
import contextlib

from eval.sim.engine import Engine, Sequence


class Waiter:
    """What a handler may see: tokens delivered per choice (`emitted`), which lags the engine's own
    counters by one step because the engine applies a step before the runner has slept through it."""

    __slots__ = ("seqs", "emitted", "finished", "aborted", "_fut", "_pending")

    def __init__(self, seqs: list[Sequence]) -> None:
        self.seqs = seqs
        self.emitted = [0] * len(seqs)
        self.finished = 0
        self.aborted = False
        self._fut: asyncio.Future[None] | None = None
        self._pending = False  # delivered while the handler was busy (e.g. in a slow send)

    @property
    def done(self) -> bool:
        return self.aborted or self.finished == len(self.seqs)

    def deliver(self, index: int) -> None:
        seq = self.seqs[index]
        self.emitted[index] = seq.num_emitted
        if seq.finished:
            self.finished += 1
        self.wake()

    def wake(self) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)
        else:
            self._pending = True

    async def wait(self) -> None:
        """Return after the next progress of any of this request's sequences (or an abort)."""
        if self.done or self._pending:
            self._pending = False
            return
        self._fut = asyncio.get_running_loop().create_future()
        await self._fut
        self._fut = None


class EngineRunner:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._waiters: dict[int, tuple[Waiter, int]] = {}
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def submit(self, seqs: list[Sequence]) -> Waiter:
        waiter = Waiter(seqs)
        for i, seq in enumerate(seqs):
            self.engine.add(seq)
            self._waiters[seq.seq_id] = (waiter, i)
        self._work.set()
        return waiter

    def abort(self, waiter: Waiter) -> None:
        now = asyncio.get_running_loop().time()
        for seq in waiter.seqs:
            self.engine.abort(seq, now)
            self._waiters.pop(seq.seq_id, None)
        waiter.aborted = True
        waiter.wake()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        while True:
            if not engine.has_work:
                self._work.clear()
                await self._work.wait()
                continue
            now = loop.time()
            outcome = engine.step(now)
            if not outcome.progressed:  # cannot happen with a valid profile; never spin
                self._work.clear()
                await self._work.wait()
                continue
            delay = now + outcome.duration - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            waiters = self._waiters
            for seq in outcome.progressed:
                entry = waiters.get(seq.seq_id)
                if entry is None:
                    continue  # aborted while the step ran
                if seq.finished:
                    del waiters[seq.seq_id]
                entry[0].deliver(entry[1])
