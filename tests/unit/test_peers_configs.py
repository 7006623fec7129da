"""What the peer benchmark starts each gateway with (eval/bench/peers/configs.py), the wrk script of the
routed side, and the floor relay (eval/bench/peers/floor.py) relaying unary and SSE bodies in-process."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from eval.bench.overhead.wrk import wrk_script
from eval.bench.peers.configs import (
    litellm_config,
    litellm_master_key,
    ours_policy,
    ours_routed_policy,
    portkey_headers,
    quiet_log_config,
    request_body,
)
from eval.bench.peers.floor import create_app
from eval.bench.peers.measure import unique_prompts
from eval.bench.peers.sides import Side
from gateway.config import parse_policy
from gateway.tenancy.keys import generate_key, hash_key


def test_our_policies_parse_with_auth_redis_limits_and_the_routed_alias() -> None:
    sha = hash_key(generate_key())
    ours = parse_policy(ours_policy(9001, sha), "ours.yaml")
    assert [p.name for p in ours.pools] == ["small"]
    assert ours.limits.backend == "redis"
    assert [k.sha256 for k in ours.tenancy.keys] == [sha]
    routed = parse_policy(ours_routed_policy(9001, sha), "routed.yaml")
    assert [p.name for p in routed.pools] == ["small", "large"]
    auto = next(m for m in routed.models if m.name == "auto")
    assert auto.route.policy is not None
    assert routed.limits.backend == "redis"
    # Both pools point at the one upstream: the routed figure is the price of the decision alone.
    assert {str(p.endpoints) for p in routed.pools} == {str(routed.pools[0].endpoints)}
    assert "9001" in str(routed.pools[0].endpoints)


def test_litellm_config_points_at_the_upstream_with_a_strong_master_key() -> None:
    key = litellm_master_key()
    assert re.fullmatch(r"sk-[A-Za-z0-9]{32}", key)
    assert litellm_master_key() != key
    cfg = yaml.safe_load(litellm_config(9001, key))
    (model,) = cfg["model_list"]
    assert model["model_name"] == "small"
    assert model["litellm_params"]["model"] == "openai/small"
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:9001/v1"
    assert cfg["general_settings"] == {"master_key": key}  # no database_url: no DB
    assert cfg["litellm_settings"]["callbacks"] == []
    log = json.loads(quiet_log_config())
    assert log["loggers"]["uvicorn.access"]["level"] == "WARNING"


def test_portkey_headers_and_the_request_body() -> None:
    headers = dict(portkey_headers(9001))
    assert headers["x-portkey-provider"] == "openai"
    assert headers["x-portkey-custom-host"] == "http://127.0.0.1:9001/v1"
    body = json.loads(request_body("auto", True, "run-7"))
    assert body["model"] == "auto" and body["stream"] is True and body["max_tokens"] == 8
    assert body["messages"][0]["content"].endswith("[run-7]")
    assert "ignore_eos" not in json.loads(request_body("small", False))
    assert "stream" not in json.loads(request_body("small", False))


def test_a_unique_side_sends_a_new_prompt_every_time_and_a_plain_one_the_same_bytes() -> None:
    routed = Side("ours-routed", 9002, 1, "auto", (("Authorization", "Bearer k"),), unique=True)
    make = routed.requests(False)
    first, second = make(), make()
    assert first != second and b"Authorization: Bearer k" in first
    plain = Side("floor", 9003, 1).requests(True)
    assert plain() == plain()


def test_unique_prompts_lua_formats_a_valid_body(tmp_path: Path) -> None:
    side = Side("ours-routed", 9002, 1, "auto", unique=True)
    script = wrk_script(tmp_path / "s.lua", side.body(False), (("Authorization", "Bearer k"),))
    unique_prompts(script, side.body(False, tag="%s-%d"), "abc")
    text = script.read_text()
    assert "request = function()" in text and '"abc"' in text
    template = re.search(r"local template = \[==\[(.*)\]==\]", text)
    assert template is not None
    # What Lua's string.format will produce, parsed back: a valid body with the unique tag.
    body = json.loads(template.group(1).replace("%s-%d", "abc-1"))
    assert body["messages"][0]["content"].endswith("[abc-1]")


async def _upstream() -> web.AppRunner:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"echo": body["model"], "path": request.path})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def _asgi_call(app: Any, body: bytes, method: str = "POST") -> tuple[list[dict[str, Any]], bytes]:
    sent: list[dict[str, Any]] = []
    events = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    async def send(msg: dict[str, Any]) -> None:
        sent.append(dict(msg))

    await app({"type": "http", "method": method, "path": "/v1/chat/completions"}, receive, send)
    return sent, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_floor_relays_unary_and_sse_bodies() -> None:
    async def scenario() -> None:
        runner = await _upstream()
        port = runner.addresses[0][1]
        app: Any = create_app(f"http://127.0.0.1:{port}")
        lifespan = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        started = asyncio.Event()
        stop = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if lifespan[0]["type"] == "lifespan.shutdown":
                await stop.wait()
            return lifespan.pop(0)

        async def send(msg: dict[str, Any]) -> None:
            if msg["type"] == "lifespan.startup.complete":
                started.set()

        life: asyncio.Task[None] = asyncio.create_task(app({"type": "lifespan"}, receive, send))
        await started.wait()
        try:
            sent, body = await _asgi_call(app, b'{"model":"small"}')
            assert sent[0]["status"] == 200
            assert json.loads(body) == {"echo": "small", "path": "/v1/chat/completions"}
            assert (b"content-length", str(len(body)).encode()) in sent[0]["headers"]
            sent, body = await _asgi_call(app, b'{"model":"small","stream":true}')
            assert sent[0]["headers"][0][1].startswith(b"text/event-stream")
            assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            assert sent[-1] == {"type": "http.response.body", "body": b""}  # the end of the stream
            sent, body = await _asgi_call(app, b"", method="GET")
            assert body == b"ok"
        finally:
            stop.set()
            await life
            await runner.cleanup()

    asyncio.run(scenario())


@pytest.mark.parametrize("name", ["litellm", "portkey"])
def test_missing_peers_are_named(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import eval.bench.peers.sides as sides

    monkeypatch.setattr(sides, "LITELLM_BIN", tmp_path / "nope")
    monkeypatch.setattr(sides, "PORTKEY_JS", tmp_path / "nope.js")
    assert sides.missing_peers(["ours", name, "floor"]) == [name]
