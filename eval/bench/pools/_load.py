"""Open-loop streaming load: Poisson arrivals at a fixed rate, TTFT and outcome per request.

Open loop (arrivals do not wait for answers) so a slow strategy cannot hide behind a slower offered
load: both strategies of a comparison see the same arrival times and the same request bodies.
TTFT is measured at the client: request sent -> first SSE `data:` event received.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

_JSON = {"content-type": "application/json"}


@dataclass(frozen=True, slots=True)
class Result:
    sent_at: float  # seconds since the load started
    ttft: float | None  # seconds; None when no event arrived
    status: int
    ok: bool  # 200 and the stream ended with [DONE] and no error event
    answered_s: float | None = None  # request sent -> a refusal's response head (not 200)


async def _one(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], at: float, headers: dict[str, str]
) -> Result:
    t0 = time.perf_counter()
    ttft: float | None = None
    try:
        async with session.post(url, data=orjson.dumps(body), headers=headers) as r:
            if r.status != 200:
                answered = time.perf_counter() - t0
                await r.read()
                return Result(at, None, r.status, False, answered)
            buf = b""
            async for chunk in r.content.iter_any():
                if ttft is None and b"data:" in chunk:
                    ttft = time.perf_counter() - t0
                buf = (buf + chunk)[-256:]
            return Result(at, ttft, 200, b"data: [DONE]" in buf and b'"error"' not in buf)
    except (TimeoutError, aiohttp.ClientError):
        return Result(at, ttft, 0, False)


async def run_load(
    url: str,
    make_body: Callable[[int], dict[str, Any]],
    rate: float,
    duration: float,
    seed: int = 1,
    key: str | None = None,
) -> list[Result]:
    """`key`: sent as a Bearer API key (a tenant of its own), else no authorization."""
    headers = _JSON if key is None else {**_JSON, "authorization": f"Bearer {key}"}
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        arrivals.append(t)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        start = time.perf_counter()
        tasks = []
        for i, at in enumerate(arrivals):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, make_body(i), at, headers)))
        return list(await asyncio.gather(*tasks))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]
