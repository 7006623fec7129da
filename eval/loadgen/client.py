"""Send one planned request over a shared aiohttp session and time it.

Times are `time.perf_counter()` seconds. A request's clock starts at its *scheduled* time (open loop:
its arrival), not when a connection became free, so time spent queued in the client because the
server is slow counts against the server, as it would for a real user (no coordinated omission).

- TTFT: scheduled start -> the first stream chunk that carries generated content.
- TPOT: (last content chunk - first content chunk) / (completion_tokens - 1), from the server's usage.
- E2E: scheduled start -> the end of the body (the `[DONE]` event for streams).
Non-streamed requests have no TTFT/TPOT (the client sees nothing before the whole answer).

Error kinds: `http_<status>`, `timeout`, `connection` (refused, reset, truncated body), `stream_error`
(an `{"error": ...}` event inside a 200 stream), `stream_truncated` (no `[DONE]`), `invalid_response`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp
import orjson

from eval.loadgen.plan import RequestSpec
from eval.loadgen.sse import SSEParser, classify


@dataclass(slots=True)
class Sample:
    index: int
    alias: str
    tenant: str | None
    stream: bool
    slo_class: str | None
    start: float  # scheduled start, seconds from the run's t0
    end: float = 0.0
    ttft: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    content_chunks: int = 0
    error: str | None = None
    measured: bool = True

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.last_token is None:
            return None
        n = self.completion_tokens if self.completion_tokens is not None else self.content_chunks
        if n < 2:
            return None
        return (self.last_token - self.first_token) / (n - 1)


def make_session(limit: int, timeout_s: float, connect_timeout_s: float) -> aiohttp.ClientSession:
    """One session for the whole run; the connector allows `limit` connections (the concurrency)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
    # Responses are parsed by hand (orjson); skipping auto-decompression keeps the hot path short.
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)


def _usage(sample: Sample, usage: object) -> None:
    if isinstance(usage, dict):
        p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
        sample.prompt_tokens = p if isinstance(p, int) else None
        sample.completion_tokens = c if isinstance(c, int) else None


async def execute(
    session: aiohttp.ClientSession, url: str, spec: RequestSpec, t0: float, scheduled: float
) -> Sample:
    """Run `spec` against `url`; `scheduled` and the sample's times are relative to `t0`."""
    sample = Sample(spec.index, spec.alias, spec.tenant, spec.stream, spec.slo_class, start=scheduled)
    # identity: bodies are parsed as they arrive and the session does not decompress (make_session).
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if spec.key is not None:
        headers["authorization"] = f"Bearer {spec.key}"
    try:
        async with session.post(url, data=spec.body, headers=headers) as resp:
            if resp.status != 200:
                await resp.read()
                sample.error = f"http_{resp.status}"
            elif spec.stream:
                await _read_stream(resp, sample, t0)
            else:
                raw = await resp.read()
                try:
                    _usage(sample, orjson.loads(raw).get("usage"))
                except (orjson.JSONDecodeError, AttributeError):
                    sample.error = "invalid_response"
    except TimeoutError:
        sample.error = "timeout"
    except aiohttp.ClientError:  # refused, reset, server disconnected, truncated payload
        sample.error = "connection"
    sample.end = time.perf_counter() - t0
    return sample


async def _read_stream(resp: aiohttp.ClientResponse, sample: Sample, t0: float) -> None:
    parser = SSEParser()
    done = False
    async for piece in resp.content.iter_any():
        now = time.perf_counter() - t0
        for data in parser.feed(piece):
            chunk = classify(data)
            if chunk.done:
                done = True
                continue
            if chunk.error is not None:
                sample.error = "stream_error"
                continue
            if chunk.invalid:
                sample.error = sample.error or "invalid_response"
                continue
            if chunk.content:
                if sample.first_token is None:
                    sample.first_token = now
                    sample.ttft = now - sample.start
                sample.last_token = now
                sample.content_chunks += 1
            if chunk.usage is not None:
                _usage(sample, chunk.usage)
    if not done and sample.error is None:
        sample.error = "stream_truncated"
