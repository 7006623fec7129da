"""Pools with `engine: litellm`: hosted providers reached through LiteLLM, behind a loopback bridge.

The bridge is a small aiohttp app on 127.0.0.1 (ephemeral port) in the gateway's own event loop.
Each litellm pool gets "replicas" at `/litellm/<pool>/<i>` (one per configured `api_base`, or one
using the provider's default), so the relay treats a hosted pool exactly like a vLLM pool:
timeouts, retries to another api_base, breakers, admission and metering all apply, and the vLLM
hot path stays a direct relay with no LiteLLM import. The bridge turns the OpenAI-format request
into `litellm.acompletion` / `atext_completion` / `aembedding` (OpenAI format out, streams as SSE)
and renders provider errors as OpenAI error bodies with the provider's status. LiteLLM is imported
only when such a pool exists (it takes seconds); set LITELLM_LOCAL_MODEL_COST_MAP=True offline.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from aiohttp import web

from gateway.config import Pool

_DONE = b"data: [DONE]\n\n"
# vLLM-only request fields that hosted providers reject.
_VLLM_ONLY = ("ignore_eos", "continuous_usage_stats")


def replica_paths(pool: Pool) -> list[str]:
    bases = pool.endpoints.static if pool.endpoints is not None else []
    return [f"/litellm/{pool.name}/{i}" for i in range(max(1, len(bases)))]


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": None}}
    return web.json_response(body, status=status)


class HostedBridge:
    def __init__(self, pools: list[Pool]) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map
        import litellm

        self._litellm: Any = litellm
        self._pools = {p.name: p for p in pools}
        self._runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/litellm/{pool}/{i}/v1/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        pool = self._pools.get(request.match_info["pool"])
        if pool is None:
            return _error(404, "no such hosted pool")
        bases = pool.endpoints.static if pool.endpoints is not None else []
        i = int(request.match_info["i"])
        body: dict[str, Any] = orjson.loads(await request.read())
        for key in _VLLM_ONLY:
            body.pop(key, None)
        if isinstance(body.get("stream_options"), dict):
            body["stream_options"].pop("continuous_usage_stats", None)
        body.pop("model", None)
        auth = request.headers.get("authorization", "")
        kwargs: dict[str, Any] = {
            "model": pool.model,
            "api_base": bases[i] if i < len(bases) else None,
            "api_key": auth.removeprefix("Bearer ") or None,
            **body,
        }
        lm = self._litellm
        tail = request.match_info["tail"]
        try:
            if tail == "chat/completions":
                result = await lm.acompletion(**kwargs)
            elif tail == "completions":
                result = await lm.atext_completion(**kwargs)
            elif tail == "embeddings":
                result = await lm.aembedding(**kwargs)
            else:
                return _error(404, f"unsupported endpoint /v1/{tail}")
        except Exception as exc:  # noqa: BLE001 - every provider error becomes an OpenAI error body
            status = getattr(exc, "status_code", None)
            return _error(status if isinstance(status, int) and 400 <= status < 600 else 502, str(exc))
        if not body.get("stream"):
            return web.Response(
                body=result.model_dump_json(exclude_none=True), content_type="application/json"
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        try:
            async for chunk in result:
                await resp.write(b"data: " + chunk.model_dump_json(exclude_none=True).encode() + b"\n\n")
        except Exception as exc:  # noqa: BLE001 - a provider failing mid-stream: end with an error event
            await resp.write(b"data: " + orjson.dumps({"error": {"message": str(exc)}}) + b"\n\n")
        await resp.write(_DONE)
        await resp.write_eof()
        return resp
