"""The contract suite's view of a backend: how to make limiters and how to let time pass."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Limiter
from ratelimit.redis_backend import RedisBackend


class FakeClock:
    def __init__(self) -> None:
        # Real epoch time as the start, so quota periods are today's UTC day / month.
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    kind: str
    redis_url: str | None
    clock: FakeClock = field(default_factory=FakeClock)
    prefix: str = ""
    made: list[Limiter] = field(default_factory=list)

    async def make(self, lease_s: float = 30.0, sub_window_s: float = 5.0) -> Limiter:
        """A limiter; all limiters of one harness share state (two gateway replicas on one Redis)."""
        limiter: Limiter
        if self.kind == "memory":
            if self.made:
                return self.made[0]
            limiter = MemoryBackend(
                lease_s=lease_s, sub_window_s=sub_window_s, clock=self.clock, epoch_offset_s=0.0
            )
        else:
            assert self.redis_url is not None
            backend = RedisBackend.from_url(
                self.redis_url,
                lease_s=lease_s,
                key_prefix=self.prefix,
                sub_window_s=sub_window_s,
                client="resp" if self.kind == "resp" else "redis-py",
                # The contract is about decisions, not latency: 60 admissions at once open as many
                # connections, which the production 0.25 s connect timeout failed on a loaded CI core.
                connect_timeout_s=2.0,
                op_timeout_s=2.0,
            )
            await backend.load()
            limiter = backend
        self.made.append(limiter)
        return limiter

    async def advance(self, seconds: float) -> None:
        if self.kind == "memory":
            self.clock.now += seconds
        else:
            await asyncio.sleep(seconds)
