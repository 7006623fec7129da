"""The limiter's lean Redis client against a real redis-server, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rexc
import uvloop

from ratelimit.resp import RespClient
from tests.support.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


def run_on_both_loops(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(make())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(make())


def test_pipelined_calls_scripts_and_errors(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()

    async def scenario() -> None:
        client = RespClient.from_url(server.url)
        try:
            replies = await asyncio.gather(*(client.execute("INCR", "n") for _ in range(200)))
            assert sorted(replies) == sorted(set(replies)) and len(replies) == 200  # in-order, none lost
            sha = await client.script_load("return {KEYS[1], ARGV[1], 7}")
            assert await client.evalsha(sha, 1, "k", "v") == [b"k", b"v", 7]
            with pytest.raises(rexc.NoScriptError):
                await client.evalsha("0" * 40, 0)
            with pytest.raises(rexc.ResponseError):
                await client.execute("NOT-A-COMMAND")
            assert await client.execute("PING") == b"PONG"  # the connection survives error replies
        finally:
            await client.aclose()

    try:
        run_on_both_loops(scenario)
    finally:
        server.kill()


def test_unreachable_and_killed_server_raise_connection_errors_quickly(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()

    async def scenario() -> None:
        client = RespClient.from_url(server.url, op_timeout_s=0.3)
        assert await client.execute("PING") == b"PONG"
        server.kill()
        loop = asyncio.get_running_loop()
        t = loop.time()
        with pytest.raises((rexc.ConnectionError, rexc.TimeoutError)):
            await client.execute("PING")
        with pytest.raises(rexc.ConnectionError):
            await client.execute("PING")  # reconnect attempt: refused
        assert loop.time() - t < 2
        server.start()  # same port: the next call reconnects by itself
        assert await client.execute("PING") == b"PONG"
        await client.aclose()

    try:
        run_on_both_loops(scenario)
    finally:
        server.kill()
