"""A one-line progress display on stderr, without dependencies.

On a terminal the line is redrawn in place (`\\r`) at most 5 times a second; when stderr is a file or a
pipe (CI logs) a plain line is written every 10 s instead, so logs stay readable. Callers report events;
the display decides when to draw.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int | None, duration_s: float | None, stream: TextIO | None = None):
        self._out = stream if stream is not None else sys.stderr
        self._tty = self._out.isatty()
        self._label = label
        self._total = total
        self._duration = duration_s
        self._t0 = time.monotonic()
        self._last_draw = 0.0
        self.sent = 0
        self.done = 0
        self.errors = 0

    def on_sent(self) -> None:
        self.sent += 1
        self._maybe_draw()

    def on_done(self, ok: bool) -> None:
        self.done += 1
        if not ok:
            self.errors += 1
        self._maybe_draw()

    def _fraction(self, elapsed: float) -> float:
        parts = []
        if self._total:
            parts.append(self.done / self._total)
        if self._duration:
            parts.append(elapsed / self._duration)
        return min(max(parts, default=0.0), 1.0)

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        frac = self._fraction(elapsed)
        width = 24
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        inflight = self.sent - self.done
        return (
            f"{self._label} [{bar}] {frac * 100:3.0f}% {elapsed:6.1f}s  "
            f"done {self.done}  in flight {inflight}  errors {self.errors}"
        )

    def _maybe_draw(self) -> None:
        now = time.monotonic()
        if now - self._last_draw < (0.2 if self._tty else 10.0):
            return
        self._last_draw = now
        if self._tty:
            self._out.write("\r" + self.line() + "\x1b[K")
        else:
            self._out.write(self.line() + "\n")
        self._out.flush()

    def close(self) -> None:
        self._out.write(("\r" + self.line() + "\x1b[K\n") if self._tty else self.line() + "\n")
        self._out.flush()
