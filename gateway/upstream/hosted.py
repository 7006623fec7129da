"""Pools with `engine: litellm`: hosted providers reached through LiteLLM, in-process.

`LiteLLMTransport` is a transport (gateway.upstream.transport) like the HTTP ones: the relay builds
the same `Request` (OpenAI-format body, the pool's auth header, timeouts) for a replica
`litellm://<pool>/<i>` (one per configured `api_base`, or one using the provider's default;
gateway.upstream.pool_client.hosted_replicas), and gets the same `Reply`: a JSON body, an SSE stream
ending with `[DONE]`, or the provider's error as an OpenAI error body with the provider's status. So
a hosted pool is treated exactly like a vLLM pool (timeouts, retries to another api_base, breakers,
admission and metering all apply) with no HTTP hop of its own: `litellm.acompletion` /
`atext_completion` / `aembedding` run in the gateway's event loop, and the vLLM hot path never
imports LiteLLM. LiteLLM is imported only when such a pool exists (it takes seconds); the price map
is never fetched (LITELLM_LOCAL_MODEL_COST_MAP=True).

What the pool's config says wins over the body: `model`, `api_base` and `api_key` are the pool's, and
LiteLLM's own connection and credential arguments are dropped from a client's body (a client must
not point the gateway's provider key at a server of its choosing). A stream's chunks are written as
the provider sends them (`data: <chunk>`, then `[DONE]`); a provider failing mid-stream ends it with
an error event (the relay rewrites it in the gateway's words). `total_s` bounds the whole exchange,
as it does over HTTP; closing an unfinished stream closes the provider's.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson

from gateway.config import Pool
from gateway.errors import TransportTimeout
from gateway.upstream.transport import HOSTED_SCHEME, Request
from router.config import Price

__all__ = ["LiteLLMTransport"]

_DONE = b"data: [DONE]\n\n"
# vLLM-only request fields that hosted providers reject.
_VLLM_ONLY = ("ignore_eos", "continuous_usage_stats", "chat_template_kwargs")  # hosted chat refuses these
# LiteLLM's arguments for where and as whom to call: the pool's config decides them, never a body.
_CONTROL = frozenset(
    {
        "api_base", "base_url", "api_key", "api_version", "organization", "custom_llm_provider",
        "extra_headers", "headers", "timeout", "num_retries", "max_retries", "client", "deployment_id",
        "azure_ad_token", "azure_ad_token_provider", "model_list", "metadata", "proxy_server_request",
    }
)  # fmt: skip
_CONTROL_PREFIXES = ("litellm_", "aws_", "vertex_", "watsonx_")
_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"


def _error(status: int, message: str) -> _Whole:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": None}}
    return _Whole(status, orjson.dumps(body))


class _Whole:
    """A reply whose body is in hand (an answer, or the provider's error)."""

    __slots__ = ("status", "_body", "_sent")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body
        self._sent = False

    def header(self, name: bytes) -> str | None:
        return _JSON if name == b"content-type" else None

    async def read(self) -> bytes:
        self._sent = True
        return self._body

    async def readany(self) -> bytes:
        if self._sent:
            return b""
        self._sent = True
        return self._body

    def release(self) -> None:
        self._sent = True

    def close(self) -> None:
        self._sent = True


class _Stream:
    """A provider's stream as SSE bytes, one event per `readany`, within the exchange's deadline."""

    __slots__ = ("status", "_chunks", "_deadline", "_done", "_closers")

    def __init__(self, chunks: Any, deadline: float, closers: set[asyncio.Task[None]]) -> None:
        self.status = 200
        self._chunks: Any = chunks  # LiteLLM's stream wrapper: async iterator of chunk models, aclose()
        self._deadline = deadline
        self._done = False
        self._closers = closers

    def header(self, name: bytes) -> str | None:
        return _SSE if name == b"content-type" else None

    async def readany(self) -> bytes:
        chunks = self._chunks
        if chunks is None:
            if self._done:
                return b""
            self._done = True
            return _DONE
        try:
            async with asyncio.timeout_at(self._deadline):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            self._chunks = None
            self._done = True
            return _DONE
        except TimeoutError:
            self.close()
            raise TransportTimeout("the hosted provider's stream exceeded the total timeout") from None
        except Exception as exc:  # noqa: BLE001 - a provider failing mid-stream: its error event, then [DONE]
            self._chunks = None
            return b"data: " + orjson.dumps({"error": {"message": str(exc)}}) + b"\n\n"
        data: str = chunk.model_dump_json(exclude_none=True)
        return b"data: " + data.encode() + b"\n\n"

    async def read(self) -> bytes:
        out: list[bytes] = []
        while chunk := await self.readany():
            out.append(chunk)
        return b"".join(out)

    def release(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the provider's stream (its connection closes, the provider stops generating)."""
        chunks, self._chunks, self._done = self._chunks, None, True
        if chunks is not None and hasattr(chunks, "aclose"):
            task = asyncio.ensure_future(_aclose(chunks))
            self._closers.add(task)  # held until done: a task only the loop references may vanish
            task.add_done_callback(self._closers.discard)


async def _aclose(chunks: Any) -> None:
    try:
        await chunks.aclose()
    except Exception:  # noqa: BLE001 - best effort: the stream is abandoned either way
        pass


def bundled_price(model: str) -> Price | None:
    """The price of a hosted `model` (`openai/gpt-4o-mini`) in LiteLLM's bundled cost map (offline), for a
    hosted pool the policy gives no `price`; None when LiteLLM is not installed or does not know it."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map
    try:
        import litellm

        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - not installed, or a model it does not know: no price
        return None
    inp, out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if not isinstance(inp, int | float) or not isinstance(out, int | float):
        return None
    cached = info.get("cache_read_input_token_cost")
    # USD per token x 10^6 = USD per million tokens (the policy's unit).
    return Price(
        input_per_mtok=inp * 1e6,
        output_per_mtok=out * 1e6,
        cached_input_per_mtok=cached * 1e6 if isinstance(cached, int | float) else None,
    )


class LiteLLMTransport:
    """The transport of the replicas of `engine: litellm` pools."""

    def __init__(self, pools: list[Pool]) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map
        import litellm

        self._litellm: Any = litellm
        self._pools = {p.name: p for p in pools}
        self._closers: set[asyncio.Task[None]] = set()

    def _target(self, base: str) -> tuple[Pool, str | None] | None:
        """The pool and api_base of a replica `litellm://<pool>/<i>`."""
        name, _, index = base.removeprefix(HOSTED_SCHEME).partition("/")
        pool = self._pools.get(name)
        if pool is None or not index.isdigit():
            return None
        bases = pool.endpoints.static if pool.endpoints is not None else []
        i = int(index)
        return pool, bases[i] if i < len(bases) else None

    async def handle(self, request: Request) -> _Whole | _Stream:
        target = self._target(request.base)
        if target is None:
            return _error(404, f"no hosted pool at {request.base}")
        pool, api_base = target
        lm = self._litellm
        if request.path == "/tokenize":
            return await self._tokenize(pool, request.body)
        call = {
            "/v1/chat/completions": lm.acompletion,
            "/v1/completions": lm.atext_completion,
            "/v1/embeddings": lm.aembedding,
        }.get(request.path)
        if call is None:
            return _error(404, f"unsupported endpoint {request.path}")
        body: dict[str, Any] = orjson.loads(request.body)
        for key in _VLLM_ONLY:
            body.pop(key, None)
        if isinstance(body.get("stream_options"), dict):
            body["stream_options"].pop("continuous_usage_stats", None)
        kwargs = {k: v for k, v in body.items() if k not in _CONTROL and not k.startswith(_CONTROL_PREFIXES)}
        auth = request.headers.get("authorization", "")
        kwargs.update(model=pool.model, api_base=api_base, api_key=auth.removeprefix("Bearer ") or None)
        deadline = asyncio.get_running_loop().time() + request.total_s
        try:
            async with asyncio.timeout_at(deadline):
                result = await call(**kwargs)
        except TimeoutError:
            late = f"the hosted pool '{pool.name}' did not answer within {request.total_s:g}s"
            raise TransportTimeout(late) from None
        except Exception as exc:  # noqa: BLE001 - every provider error becomes an OpenAI error body
            status = getattr(exc, "status_code", None)
            return _error(status if isinstance(status, int) and 400 <= status < 600 else 502, str(exc))
        if hasattr(result, "__anext__"):  # asked to stream (the body's `stream`): LiteLLM's stream wrapper
            return _Stream(result, deadline, self._closers)
        answer: str = result.model_dump_json(exclude_none=True)
        return _Whole(200, answer.encode())

    async def _tokenize(self, pool: Pool, payload: bytes) -> _Whole:
        """vLLM's `/tokenize` for a hosted model: LiteLLM's counter (the provider's tokenizer where
        LiteLLM knows it, else tiktoken's), off the event loop (it is CPU work on the whole prompt)."""
        body = orjson.loads(payload)
        try:
            count = await asyncio.to_thread(
                self._litellm.token_counter,
                model=pool.model,
                messages=body.get("messages"),
                tools=body.get("tools"),
            )
        except Exception as exc:  # noqa: BLE001 - a counter failure is the pool's 400, as vLLM's would be
            return _error(400, f"cannot count tokens: {exc}")
        return _Whole(200, orjson.dumps({"count": count}))
