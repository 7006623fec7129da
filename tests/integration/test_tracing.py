"""Traces with the in-memory exporter: a gateway served in this process (uvicorn in a thread) in
front of a real simulator (behind a recording proxy), driven by the openai SDK.

Asserts span names, parent/child structure and `gen_ai.*` attributes for a streamed and a
non-streamed request and for a cascade, that the simulator receives the attempt span's W3C
`traceparent`, and that a caller's own `traceparent` makes the request part of its trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.app import GatewayApp
from gateway.config import load_policy
from gateway.observability.otel import Tracing
from gateway.settings import Settings
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.procs import free_port, wait_http
from tests.support.recording_proxy import recording_proxy
from tests.support.stack import Stack
from tests.support.thread_server import uvicorn_in_thread


@dataclass
class Traced:
    url: str
    key: str
    spans: InMemorySpanExporter
    seen: list[tuple[str, dict[str, str]]]  # what the simulator received


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    tmp: Path = tmp_path_factory.mktemp("traces")
    sim_port, proxy_port, gw_port = free_port(), free_port(), free_port()
    proxy = f"http://127.0.0.1:{proxy_port}"
    key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: small, model: m, endpoints: {{static: ["{proxy}"]}}}}
  - {{name: large, model: m, endpoints: {{static: ["{proxy}"]}}}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 4, cap: 8}}}}
  - name: auto
    max_tokens: {{default: 4, cap: 8}}
    route:
      policy:
        tiers: [{{pool: small}}, {{pool: large}}]
        cascade: {{scorers: [{{kind: logprob, accept_threshold: 1.0}}], max_escalations: 1}}
tenancy:
  keys:
    - {{id: t, sha256: {hash_key(key)}, org: acme, app: web}}
"""
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = GatewayApp(load_policy(str(policy)), Settings(port=gw_port), tracing=Tracing(provider))
    with Stack(tmp) as s:
        sim = s.sim("m", "--profile", "instant", port=sim_port)
        seen = s.enter(recording_proxy(proxy_port, sim.url))
        s.enter(uvicorn_in_thread(uvicorn.Config(app, host="127.0.0.1", port=gw_port, log_level="warning")))
        wait_http(f"http://127.0.0.1:{gw_port}/readyz")
        yield Traced(f"http://127.0.0.1:{gw_port}", key, exporter, seen)


def _trace_of(spans: list[ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    assert root.context is not None
    return [s for s in spans if s.context is not None and s.context.trace_id == root.context.trace_id]


def _root(traced: Traced, alias: str | None) -> tuple[ReadableSpan, list[ReadableSpan]]:
    # The root span ends in the server's thread just after the last byte is sent, which can be after
    # the client has read it: wait for it (a wait for an event, not a timing assertion).
    name = f"chat {alias}" if alias else "chat"
    spans: list[ReadableSpan] = []

    def roots() -> list[ReadableSpan]:
        spans[:] = traced.spans.get_finished_spans()
        return [s for s in spans if s.name == name and s.kind is SpanKind.SERVER]

    [root] = wait_until(roots, f"the root span {name!r}", timeout=10, interval=0.01)
    return root, _trace_of(spans, root)


def _children(trace: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in trace if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _calls(traced: Traced) -> list[tuple[str, dict[str, str]]]:
    """What the simulator received but the pool scraper's GET /metrics, which comes at its own pace."""
    return [(path, headers) for path, headers in traced.seen if path != "/metrics"]


def _client(traced: Traced) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{traced.url}/v1", api_key=traced.key, max_retries=0)


def test_streamed_and_unary_requests_have_genai_spans(traced: Traced) -> None:
    for stream in (True, False):
        traced.spans.clear()
        traced.seen.clear()
        client = _client(traced)
        if stream:
            for _ in client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=0.5
            ):
                pass
        else:
            client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}])
        root, trace = _root(traced, "small")
        assert root.parent is None
        a = root.attributes or {}
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "small"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["http.response.status_code"] == 200 and a["llmgw.org"] == "acme"
        assert a.get("gen_ai.request.stream", False) is stream
        assert ("gen_ai.response.time_to_first_chunk" in a) is stream
        if stream:
            assert a["gen_ai.request.temperature"] == 0.5
        names = sorted(s.name for s in _children(trace, root))
        assert names == ["auth", "chat m", "rate_limit"]
        [upstream] = [s for s in trace if s.name == "chat m"]
        u = upstream.attributes or {}
        assert upstream.kind is SpanKind.CLIENT
        assert u["gen_ai.provider.name"] == "vllm" and u["gen_ai.request.model"] == "m"
        assert u["server.address"] == "127.0.0.1" and u["llmgw.pool"] == "small"
        # The simulator got the attempt span's context.
        [(path, headers)] = _calls(traced)
        assert path == "/v1/chat/completions"
        ctx = upstream.context
        assert ctx is not None
        version, trace_id, span_id, flags = headers["traceparent"].split("-")
        assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
        assert int(flags, 16) & 1  # sampled


def test_cascade_spans_each_call_and_each_judgement(traced: Traced) -> None:
    traced.spans.clear()
    traced.seen.clear()
    _client(traced).chat.completions.create(model="auto", messages=[{"role": "user", "content": "q"}])
    root, trace = _root(traced, "auto")
    children = _children(trace, root)
    assert sorted(s.name for s in children) == [
        "auth", "cascade.judge", "cascade.judge", "chat m", "chat m", "rate_limit", "routing",
    ]  # fmt: skip
    pools = sorted((s.attributes or {})["llmgw.pool"] for s in children if s.name == "chat m")
    assert pools == ["large", "small"]  # the cheap call, then the escalation
    assert len(_calls(traced)) == 2
    ids = {h["traceparent"].split("-")[1] for _, h in _calls(traced)}
    assert ids == {f"{root.context.trace_id:032x}"}  # type: ignore[union-attr]


def test_a_callers_traceparent_is_continued(traced: Traced) -> None:
    traced.spans.clear()
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = httpx.post(
        f"{traced.url}/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {traced.key}", "traceparent": f"00-{trace_id}-{parent_id}-01"},
    )
    assert r.status_code == 200
    root, _ = _root(traced, "small")
    assert root.context is not None and root.parent is not None
    assert f"{root.context.trace_id:032x}" == trace_id and f"{root.parent.span_id:016x}" == parent_id


def test_errors_are_marked(traced: Traced) -> None:
    traced.spans.clear()
    r = httpx.post(
        f"{traced.url}/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": "Bearer sk-wrong"},
    )
    assert r.status_code == 401
    root, _ = _root(traced, None)  # unauthenticated: the body's attributes are not recorded
    assert (root.attributes or {})["error.type"] == "401"
