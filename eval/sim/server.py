"""The simulator's raw ASGI application (no framework: the zero-latency path must stay cheap).

Request flow for `/v1/chat/completions` and `/v1/completions`: read the body, parse it into a `Job` with
every choice's answer pre-generated (`requests.py`), turn each choice into an engine `Sequence`, then
- zero-latency profile: `Engine.complete_now` runs each sequence to completion inline and the whole
  response (or the whole SSE stream) is written at once;
- otherwise: the `EngineRunner` paces tokens; the handler awaits its `Waiter` and writes each delivered
  token as an SSE chunk (or the final body), while a watcher task reads the ASGI receive channel so an
  `http.disconnect` aborts the sequences at once (freeing KV; like vLLM 0.32 the abort is not counted in
  `request_success_total`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from eval.sim.adapters import AdapterRegistry, LoraModule, load_request, model_permission, unload_request
from eval.sim.embeddings import embeddings_response
from eval.sim.engine import Engine, Sequence
from eval.sim.errors import ApiError
from eval.sim.lora import EngineLora, LoraSettings
from eval.sim.metrics import CONTENT_TYPE, build_registry, render
from eval.sim.profile import SimProfile
from eval.sim.replay import ReplayIndex
from eval.sim.requests import Context, Job, decode_body, parse_chat, parse_completion, tokenize_response
from eval.sim.responses import StreamRenderer, full_response
from eval.sim.runner import EngineRunner, Waiter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = (b"content-type", b"application/json")
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_UNAUTHORIZED = b'{"error":"Unauthorized"}'


class ClientGone(Exception):
    """The client disconnected before the request body was read."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    profile: SimProfile
    served_names: tuple[str, ...]
    api_keys: tuple[str, ...] = ()
    replay: ReplayIndex | None = None
    legacy_metrics: bool = False
    prompt_tokens_details: bool = False  # vLLM's --enable-prompt-tokens-details
    lora: LoraSettings | None = None  # --enable-lora
    lora_modules: tuple[LoraModule, ...] = ()
    runtime_lora: bool = False  # VLLM_ALLOW_RUNTIME_LORA_UPDATING: the load/unload routes exist
    tool_call_rate: float = 0.0  # --tool-call-rate (agent.py)
    reasoning_parser: str | None = None  # vLLM's --reasoning-parser (agent.py)
    record_requests: str | None = None  # --record-requests: append each generation body to this JSONL file


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    hdrs = [_JSON, (b"content-length", str(len(body)).encode())]
    if headers:
        hdrs.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class SimApp:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        profile = config.profile
        self.engine = Engine(profile, EngineLora(config.lora) if config.lora is not None else None)
        self.adapters: AdapterRegistry | None = None
        if config.lora is not None:  # ValueError when a --lora-modules adapter does not load
            self.adapters = AdapterRegistry(config.served_names, config.lora.max_lora_rank)
            self.adapters.load_modules(list(config.lora_modules))
        self.registry = build_registry(self.engine, config.served_names[0], config.legacy_metrics)
        self.ctx = Context(
            profile=profile,
            served_names=config.served_names,
            replay=config.replay,
            rng=random.Random(profile.seed),
            id_prefix=os.urandom(4).hex(),
            prompt_tokens_details=config.prompt_tokens_details,
            adapters=self.adapters,
            tool_call_rate=config.tool_call_rate,
            reasoning_parser=config.reasoning_parser,
        )
        self.instant = profile.is_instant
        self.in_flight = 0
        self.created = int(time.time())
        self._auth = {f"Bearer {k}".encode() for k in config.api_keys}
        self._runner: EngineRunner | None = None
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/tokenize"): self._tokenize,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/load"): self._load,
        }
        if config.runtime_lora:  # vLLM attaches these routes only then
            self._routes[("POST", "/v1/load_lora_adapter")] = self._load_adapter
            self._routes[("POST", "/v1/unload_lora_adapter")] = self._unload_adapter
        self._paths = {path for _, path in self._routes}

    @property
    def runner(self) -> EngineRunner:
        if self._runner is None:  # first request before/without lifespan (e.g. a test transport)
            self._runner = EngineRunner(self.engine)
            self._runner.start()
        return self._runner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                _ = self.runner
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self._runner is not None:
                    await self._runner.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        handler = self._routes.get((method, path))
        if handler is None:
            status, detail = (405, b"Method Not Allowed") if path in self._paths else (404, b"Not Found")
            await _respond(send, status, b'{"detail":"' + detail + b'"}')
            return
        if self._auth and path.startswith("/v1") and not self._authorized(scope):
            await _respond(send, 401, _UNAUTHORIZED)
            return
        try:
            await handler(scope, receive, send)
        except ClientGone:
            return

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return bytes(value) in self._auth
        return False

    # --- simple endpoints -------------------------------------------------------------------------
    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = render(self.registry)
        hdrs = [(b"content-type", CONTENT_TYPE), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": hdrs})
        await send({"type": "http.response.body", "body": body})

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, orjson.dumps({"server_load": self.in_flight}))

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = self.config.served_names[0]
        data = [
            {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": root,
                "parent": None,
                "max_model_len": self.config.profile.max_model_len,
                "permission": [model_permission(f"modelperm-{self.ctx.id_prefix}{i}", self.created)],
            }
            for i, name in enumerate(self.config.served_names)
        ]
        if self.adapters is not None:
            data.extend(self.adapters.cards(self.created, self.ctx.id_prefix))
        await _respond(send, 200, orjson.dumps({"object": "list", "data": data}))

    # --- LoRA adapters (adapters.py) ----------------------------------------------------------------
    async def _load_adapter(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._adapter_call(receive, send, load_request)

    async def _unload_adapter(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._adapter_call(receive, send, unload_request)

    async def _adapter_call(
        self, receive: Receive, send: Send, call: Callable[[AdapterRegistry, dict[str, Any]], str]
    ) -> None:
        raw = await _read_body(receive)
        try:
            if self.adapters is None:
                raise ApiError(500, "LoRA is not enabled (--enable-lora).", None, "InternalServerError")
            body = decode_body(raw)
            text = call(self.adapters, body)
        except ApiError as exc:
            await _respond(send, exc.status, exc.body())
            return
        if self.engine.lora is not None:  # unloaded or reloaded in place: its slot is stale
            self.engine.lora.slots.discard(body["lora_name"])
        out = text.encode()  # vLLM answers with a bare Starlette Response: no content type
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": out})

    async def _embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _read_body(receive)
        try:
            body, tokens = embeddings_response(self.ctx, decode_body(raw))
        except ApiError as exc:
            await _respond(send, exc.status, exc.body())
            return
        self.engine.stats.prompt_tokens += tokens
        await _respond(send, 200, body)

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _read_body(receive)
        try:
            out = tokenize_response(self.ctx, decode_body(raw))
        except ApiError as exc:
            await _respond(send, exc.status, exc.body())
            return
        await _respond(send, 200, orjson.dumps(out))

    # --- generation -------------------------------------------------------------------------------
    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse_chat)

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse_completion)

    async def _generate(
        self, receive: Receive, send: Send, parse: Callable[[Context, dict[str, Any]], Job]
    ) -> None:
        raw = await _read_body(receive)
        try:
            body = decode_body(raw)
            if self.config.record_requests is not None:
                self._record(body)
            job = parse(self.ctx, body)
        except ApiError as exc:
            await _respond(send, exc.status, exc.body())
            return
        extra: list[tuple[bytes, bytes]] = []
        if job.replay_hit is not None:
            extra.append((b"x-sim-replay", b"hit" if job.replay_hit else b"miss"))
        now = asyncio.get_running_loop().time()
        seqs = [
            Sequence(
                job.prompts[i // job.n].pieces_len,
                job.prompts[i // job.n].hashes,
                max(1, len(gen.pieces)),
                gen.engine_reason,
                now,
                lora=job.lora,
            )
            for i, gen in enumerate(job.choices)
        ]
        self.in_flight += 1
        try:
            if self.instant:
                await self._generate_instant(send, job, seqs, now, extra)
            else:
                await self._generate_paced(receive, send, job, seqs, extra)
        finally:
            self.in_flight -= 1

    def _record(self, body: dict[str, Any]) -> None:
        # For tests of clients (agents) that see only the gateway: what reached the model, one JSON line
        # per request, written before parsing so a refused body is on record too. Blocking, test-only.
        assert self.config.record_requests is not None
        with open(self.config.record_requests, "ab") as out:
            out.write(orjson.dumps(body) + b"\n")

    @staticmethod
    def _cached(job: Job, seqs: list[Sequence]) -> int:
        # Usage reports the prompt's cache hits once per prompt (its first choice), not per choice.
        return sum(seqs[p * job.n].cached_tokens for p in range(len(job.prompts)))

    async def _generate_instant(
        self, send: Send, job: Job, seqs: list[Sequence], now: float, extra: list[tuple[bytes, bytes]]
    ) -> None:
        for seq in seqs:
            self.engine.complete_now(seq, now)
        cached = self._cached(job, seqs)
        if not job.stream:
            await _respond(send, 200, full_response(job, cached), extra)
            return
        renderer = StreamRenderer(job)
        parts = renderer.head()
        for i, gen in enumerate(job.choices):
            parts.extend(renderer.tokens(i, len(gen.pieces), cached))
        parts.extend(renderer.tail(cached))
        await send({"type": "http.response.start", "status": 200, "headers": _SSE + extra})
        await send({"type": "http.response.body", "body": b"".join(parts)})

    async def _generate_paced(
        self, receive: Receive, send: Send, job: Job, seqs: list[Sequence], extra: list[tuple[bytes, bytes]]
    ) -> None:
        runner = self.runner
        waiter = runner.submit(seqs)
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, waiter))
        try:
            if job.stream:
                await self._stream(send, job, seqs, waiter, watcher, extra)
                return
            while not waiter.done:
                await waiter.wait()
            if waiter.aborted:
                return
            watcher.cancel()  # before the final send: afterwards receive() reports a disconnect
            await _respond(send, 200, full_response(job, self._cached(job, seqs)), extra)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if not waiter.done:  # handler cancelled (server shutdown): free the engine's work
                runner.abort(waiter)

    async def _stream(
        self,
        send: Send,
        job: Job,
        seqs: list[Sequence],
        waiter: Waiter,
        watcher: asyncio.Task[None],
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        renderer = StreamRenderer(job)
        started = False
        while True:
            await waiter.wait()
            if waiter.aborted:
                return
            cached = self._cached(job, seqs)
            parts: list[bytes] = []
            if not started:
                # Like vLLM, headers and the role chunk go out with the first token, not before.
                await send({"type": "http.response.start", "status": 200, "headers": _SSE + extra})
                parts.extend(renderer.head())
                started = True
            for i, count in enumerate(waiter.emitted):
                parts.extend(renderer.tokens(i, count, cached))
            if waiter.done:
                parts.extend(renderer.tail(cached))
                watcher.cancel()
                await send({"type": "http.response.body", "body": b"".join(parts)})
                return
            if parts:
                await send({"type": "http.response.body", "body": b"".join(parts), "more_body": True})

    async def _watch_disconnect(self, receive: Receive, waiter: Waiter) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                self.runner.abort(waiter)
                return


def build_app(config: SimConfig) -> SimApp:
    return SimApp(config)
