"""A pool that tells too much and frames its streams oddly, as its own process, for the upstream
security tests: `python -m tests.support.hostile_pool --port N`.

Each behaviour lives under its own path prefix (`http://127.0.0.1:N/<mode>/v1/chat/completions`),
so one process backs many pools:
- `leak500`, `leak400`, `leak422`: vLLM-shaped errors whose message holds internal URLs, host names
  and a token (`SECRETS`);
- `busy`, `down`: 429 / 503 with `retry-after: 99999999` and the same text;
- `crlf`: a stream framed with CRLF, comments and keep-alives, `event:`/`id:` lines before the
  usage, and `data:[DONE]` without the space (unary requests get a plain answer);
- `keepalive`: a stream that sends only `: keep-alive` comments (no token ever);
- `midstream`: one token, then an error event holding the secrets, then [DONE] (as vLLM does);
- `gzip`: a gzip-compressed answer;
- `endless`: one token, then an event that never ends (2 MiB of data with no blank line);
- `lingering`: a whole stream up to `[DONE]`, then 1.5 s before the chunked body ends (a pool that
  flushes its last chunk late: the client has its answer and may hang up);
- `badload-a`, `badload-b`: plain answers, but `/metrics` reports NaN and ±Inf among vLLM's queue
  gauges (valid exposition; two replicas behind prefix affinity, whose load bound does arithmetic).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
from aiohttp import web

from tests.support.fake_upstream import OK_BODY
from tests.support.procs import ROOT, free_port, stop, wait_http
from tests.support.stack import Stack

SECRETS = (
    "http://vllm-small-0.vllm.internal.svc.cluster.local:8000",
    "gpu-node-17.corp.example",
    "hf_SECRETtoken0123456789abcdef",
    "10.42.7.19",
)
BAD_LOAD = (
    "vllm:num_requests_waiting NaN\n"
    'vllm:num_requests_waiting{engine="1"} 2\n'
    "vllm:num_requests_running +Inf\n"
    "vllm:kv_cache_usage_perc -Inf\n"
)
LEAK = f"engine failed calling {SECRETS[0]}/v1 on {SECRETS[1]} ({SECRETS[3]}) with token {SECRETS[2]}"


def _chunk(content: str | None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if content is None else [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    body: dict[str, object] = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body["choices"] = choices
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


# What the `crlf` mode streams: bytes a WHATWG parser reads as two tokens, a usage chunk and the end.
CRLF_STREAM = (
    b": keep-alive\r\n\r\n"
    b"data: " + _chunk("Hel") + b"\r\n\r\n"
    b":\r\n\r\n"
    b"id: 2\r\ndata:" + _chunk("lo") + b"\r\n\r\n"
    b"event: usage\r\nid: 3\r\nretry: 1000\r\n"
    b"data: " + _chunk(None, {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}) + b"\r\n\r\n"
    b"data:[DONE]\r\n\r\n"
)


def _error(status: int, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": LEAK, "type": "InternalServerError", "param": None, "code": status}}
    return web.json_response(body, status=status, headers=headers)


async def _stream(
    request: web.Request, pieces: list[bytes], pause_s: float = 0.0, linger_s: float = 0.0
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for piece in pieces:
        await resp.write(piece)
        if pause_s:
            await asyncio.sleep(pause_s)
    if linger_s:
        await asyncio.sleep(linger_s)
    await resp.write_eof()
    return resp


async def _handle(request: web.Request) -> web.StreamResponse:
    mode = request.match_info["mode"]
    body = orjson.loads(await request.read())
    stream = bool(body.get("stream"))
    if mode.startswith("leak"):
        return _error(int(mode[4:]))
    if mode == "busy":
        return _error(429, {"retry-after": "99999999"})
    if mode == "down":
        return _error(503, {"retry-after": "99999999"})
    if mode == "gzip":
        return web.Response(
            body=gzip.compress(orjson.dumps(OK_BODY)),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
    if not stream:
        return web.json_response(OK_BODY)
    if mode == "crlf":
        # Cut every 5 bytes, so reads end inside CRLF pairs and inside events.
        return await _stream(request, [CRLF_STREAM[i : i + 5] for i in range(0, len(CRLF_STREAM), 5)])
    if mode == "keepalive":
        return await _stream(request, [b": keep-alive\n\n"] * 600, pause_s=0.05)
    if mode == "midstream":
        error = orjson.dumps({"error": {"message": LEAK, "type": "InternalServerError", "code": 500}})
        pieces = [b"data: " + _chunk("a") + b"\n\n", b"data: " + error + b"\n\n", b"data: [DONE]\n\n"]
        return await _stream(request, pieces)  # as vLLM ends a stream that failed
    if mode.startswith("badload"):
        return await _stream(request, [b"data: " + _chunk("a") + b"\n\n", b"data: [DONE]\n\n"])
    if mode == "lingering":
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        done = [
            b"data: " + _chunk("a") + b"\n\n",
            b"data: " + _chunk(None, usage) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
        return await _stream(request, [b"".join(done)], linger_s=1.5)
    if mode == "endless":
        endless = [b"data: " + _chunk("a") + b"\n\n", b'data: {"x":"'] + [b"y" * 65536] * 32
        return await _stream(request, endless)
    return web.Response(status=418)


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _metrics(request: web.Request) -> web.Response:
    if not request.match_info["mode"].startswith("badload"):
        return web.Response(status=404)  # the other modes' scrapes fail as they always did
    return web.Response(text=BAD_LOAD)


@contextmanager
def hostile_pool(port: int) -> Iterator[str]:
    """Run the hostile pool as its own process on 127.0.0.1:port; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile_pool", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health", proc)
        yield base
    finally:
        stop(proc)


MODES = (
    "leak500", "leak400", "leak422", "busy", "down", "crlf", "keepalive", "midstream", "gzip", "endless",
    "lingering",
)  # fmt: skip


@contextmanager
def gateway_before_hostile_pool(tmp: Path, client: str) -> Iterator[tuple[str, Path]]:
    """A gateway process (upstream client `client`: h1 or aiohttp) with one pool and alias per mode
    of a hostile pool process, and `refused`: a pool on a port nobody listens on. Each pool has one
    replica; `crlf`'s breaker opens on its first counted failure. Yields (gateway URL, its log)."""
    pool_port, gw_port, dead_port = free_port(), free_port(), free_port()
    urls = {m: f"http://127.0.0.1:{pool_port}/{m}" for m in MODES}
    urls["refused"] = f"http://127.0.0.1:{dead_port}"
    badload = f'"http://127.0.0.1:{pool_port}/badload-a", "http://127.0.0.1:{pool_port}/badload-b"'
    lines = ["pools:"]
    for name, url in urls.items():
        lines += [
            f"  - name: {name}",
            "    model: m",
            f'    endpoints: {{static: ["{url}"]}}',
            "    timeouts: {connect_s: 1, first_token_s: 1, total_s: 5}",
            "    retries: {attempts: 1}",
        ]
        if name == "crlf":  # one failure counted against its replica would show
            lines.append("    breaker: {failures: 1, open_s: 60}")
    lines += [
        "  - name: badload",
        "    model: m",
        f"    endpoints: {{static: [{badload}]}}",
        "    balancing: {strategy: prefix_affinity, scrape_interval_s: 0.2}",
    ]
    lines.append("models:")
    lines += [f"  - {{name: {name}, route: {{pool: {name}}}}}" for name in (*urls, "badload")]
    cfg = tmp / "policy.yaml"
    cfg.write_text("\n".join(lines) + "\ntenancy: {auth: disabled}\n")
    with hostile_pool(pool_port), Stack(tmp) as s:
        gw = s.gateway(cfg, port=gw_port, env={"LLMGW_UPSTREAM_CLIENT": client})
        yield gw.url, gw.log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/{mode}/v1/{tail:.*}", _handle)
    app.router.add_get("/health", _health)
    app.router.add_get("/{mode}/metrics", _metrics)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
