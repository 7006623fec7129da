"""Graceful drain on SIGTERM: readiness off at once, the server's own shutdown a delay later."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["drain_on_sigterm"]


def drain_on_sigterm(on_drain: Callable[[], None], delay_s: float) -> Callable[[], None]:
    """Wrap the server's SIGTERM handler: readiness off at once, the server's shutdown `delay_s` later.

    Kubernetes removes a terminating pod from its Service endpoints only eventually, so requests keep
    arriving for a few seconds after SIGTERM; the listener must stay open meanwhile. Then uvicorn's
    own graceful shutdown closes it and lets in-flight streams finish (LLMGW_DRAIN_SECONDS). Installed
    from the lifespan, so it works in every worker of a multi-worker server too (uvicorn installs its
    handlers before the lifespan starts). A second SIGTERM shuts down at once. Returns the undo.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signal handlers belong to the main thread (e.g. a test client's thread)
    previous = signal.getsignal(signal.SIGTERM)
    fired = False

    def handler(sig: int, frame: FrameType | None) -> None:
        nonlocal fired
        if fired or not callable(previous):
            if callable(previous):
                previous(sig, frame)
            return
        fired = True
        on_drain()
        timer = threading.Timer(delay_s, previous, (sig, frame))
        timer.daemon = True
        timer.start()

    if not callable(previous):
        return lambda: None  # no server handler to delay (not under uvicorn): leave SIGTERM alone
    signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore
