"""Servers on their own event loop in a background thread: aiohttp for fakes that tests drive
synchronously (the fake upstream, the fake Kubernetes API server), uvicorn for ASGI apps under test."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from aiohttp import web

from tests.support.poll import wait_until


@contextmanager
def serve_in_thread(
    port: int, build: Callable[[], web.Application], what: str
) -> Iterator[asyncio.AbstractEventLoop]:
    """Serve `build()`'s app on 127.0.0.1:port until the block ends; yields the server's loop.

    `build` runs on that loop (handlers that keep loop-bound state can capture it there)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runners: list[web.AppRunner] = []

    async def start() -> None:
        runner = web.AppRunner(build(), shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(10):
        raise TimeoutError(f"{what} did not start")
    try:
        yield loop
    finally:

        async def stop() -> None:
            await runners[0].shutdown()
            await runners[0].cleanup()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


@contextmanager
def uvicorn_in_thread(config: uvicorn.Config, what: str = "uvicorn") -> Iterator[uvicorn.Server]:
    """Run a uvicorn server (its own loop, a background thread) until the block ends."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def died() -> None:
        if not thread.is_alive():
            raise TimeoutError(f"{what} did not start")

    try:
        wait_until(lambda: server.started, f"{what} to start", timeout=10, interval=0.02, fail=died)
    except AssertionError:
        raise TimeoutError(f"{what} did not start") from None
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(15)
