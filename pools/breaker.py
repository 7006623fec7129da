"""Per-replica circuit breaker: closed -> open -> half-open -> closed, with an explicit clock.

Closed: traffic flows; `failures` consecutive failures (errors and timeouts, not 4xx) open it.
Open: no traffic for `open_s`. Then half-open: exactly one probe request is let through; its
success closes the breaker, its failure opens it again for another `open_s`. A probe that ends
without a verdict (the client left) frees the probe slot.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(enum.IntEnum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


@dataclass(slots=True)
class Breaker:
    failures_to_open: int
    open_s: float
    state: State = State.CLOSED
    consecutive: int = 0
    opened_at: float = 0.0
    probing: bool = False
    opens: int = 0  # times opened, for metrics

    def current(self, now: float) -> State:
        if self.state is State.OPEN and now - self.opened_at >= self.open_s:
            return State.HALF_OPEN
        return self.state

    def allows(self, now: float) -> bool:
        state = self.current(now)
        return state is State.CLOSED or (state is State.HALF_OPEN and not self.probing)

    def on_pick(self, now: float) -> None:
        if self.state is not State.CLOSED and self.current(now) is State.HALF_OPEN:
            self.state = State.HALF_OPEN
            self.probing = True

    def success(self) -> None:
        self.state = State.CLOSED
        self.consecutive = 0
        self.probing = False

    def failure(self, now: float) -> None:
        self.consecutive += 1
        self.probing = False
        if self.state is State.HALF_OPEN or (
            self.state is State.CLOSED and self.consecutive >= self.failures_to_open
        ):
            self.state = State.OPEN
            self.opened_at = now
            self.opens += 1

    def neutral(self) -> None:
        self.probing = False
