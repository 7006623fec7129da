"""A periodic status line on stderr for `llmgw` commands that work quietly for a while.

`router eval`, `router replay` and `cascade eval` compute for tens of seconds before printing anything;
without a sign of life a person cannot tell working from hung. A daemon thread writes
`llmgw router eval: embedding prompts (10 s)` every `every_s` (5 s; `$LLMGW_STATUS_EVERY_S` overrides
it, tests use a short one) until the block ends; a command that finishes sooner prints nothing extra.
stdout stays the command's result alone, so it can still be piped.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

DEFAULT_EVERY_S = 5.0


def _every_s() -> float:
    try:
        value = float(os.environ.get("LLMGW_STATUS_EVERY_S", DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S


class Status:
    """`with Status("llmgw router eval") as st: st.phase("scoring"); ...` (phase: what it does now)."""

    def __init__(self, label: str, every_s: float | None = None, stream: TextIO | None = None) -> None:
        self._label = label
        self._every = every_s if every_s is not None else _every_s()
        self._out = stream if stream is not None else sys.stderr
        self._phase = "working"
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmgw-status", daemon=True)

    def phase(self, what: str) -> None:
        self._phase = what

    def line(self) -> str:
        return f"{self._label}: {self._phase} ({time.monotonic() - self._t0:.0f} s)"

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                print(self.line(), file=self._out, flush=True)
            except (OSError, ValueError):  # stderr closed or gone: the work matters more than the line
                return

    def __enter__(self) -> Status:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
