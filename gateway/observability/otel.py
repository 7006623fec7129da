"""OpenTelemetry traces with the GenAI semantic conventions (shared/reference/otel-genai.md, v1.41).

`Tracing` implements `gateway.observability.tracing.TraceHooks`; this module is imported only when
tracing is on.

Off unless `LLMGW_TRACING=true`. Then each request gets a root span `{operation} {alias}` (kind
SERVER; `chat`, `text_completion` or `embeddings`) carrying `gen_ai.*` request attributes, usage,
`gen_ai.response.time_to_first_chunk` for streams, `error.type` on errors, and the gateway's own
`llmgw.*` attributes (org, app, pool, SLO verdict, cost). Children: `auth`, `rate_limit`,
`routing` (routed aliases), `cascade.judge` (each scoring of a cascade step), and one span per
upstream attempt `{operation} {pool model}` (kind CLIENT, `server.address`/`server.port` of the
replica, ending when the answer, or a stream's first event, is in hand). Each attempt sends its own
W3C `traceparent` to the replica, so a vLLM started with `--otlp-traces-endpoint` joins the trace. A
client's incoming `traceparent` is honoured (the request joins the caller's trace).

Sampling: parent-based, else `LLMGW_TRACE_SAMPLE_RATIO` of new traces. Export: OTLP over HTTP, where
the standard variables say (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
headers, timeout), batched off the event loop by the SDK's BatchSpanProcessor.

`gen_ai.provider.name` is the pool's engine (`vllm`, `openai`, `litellm`): not a registered value
for vllm, which the conventions allow and which is more honest than claiming the `openai` flavour.

When tracing is off, `gateway.observability.tracing.NoTracing` stands in and this module is never imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.edge.exchange import Kind
from gateway.observability.tracing import OPERATION

_REQUEST_PARAMS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("seed", "gen_ai.request.seed"),
)


def build_provider(sample_ratio: float, service_name: str = "llm-gateway") -> TracerProvider:
    """The production provider: parent-based ratio sampling, OTLP/HTTP export in batches."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class RootSpan:
    """A request's root span and the context token that made it current (detached at the end)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Span, token: object) -> None:
        self.span = span
        self.token = token


class Tracing:
    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("llmgw")
        self._propagator = TraceContextTextMapPropagator()

    def span(self, name: str) -> AbstractContextManager[Any]:
        return self._tracer.start_as_current_span(name)

    def start_request(self, kind: Kind, headers: list[tuple[bytes, bytes]]) -> RootSpan:
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in headers
            if k in (b"traceparent", b"tracestate")
        }
        parent = self._propagator.extract(carrier) if carrier else None
        op = OPERATION[kind]
        span = self._tracer.start_span(
            op,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"gen_ai.operation.name": op, "gen_ai.provider.name": "llmgw"},
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return RootSpan(span, token)

    def request_body(self, root: RootSpan, kind: Kind, body: dict[str, Any]) -> None:
        span = root.span
        if not span.is_recording():
            return
        alias = body.get("model")
        if isinstance(alias, str):
            span.update_name(f"{OPERATION[kind]} {alias}")
            span.set_attribute("gen_ai.request.model", alias)
        if body.get("stream"):
            span.set_attribute("gen_ai.request.stream", True)
        for key, attr in _REQUEST_PARAMS:
            v = body.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                span.set_attribute(attr, v)
        n = body.get("n")
        if isinstance(n, int) and n != 1:
            span.set_attribute("gen_ai.request.choice.count", n)

    def end_request(self, root: RootSpan, attributes: dict[str, Any], status: int) -> None:
        span = root.span
        try:
            if span.is_recording():
                span.set_attributes({k: v for k, v in attributes.items() if v is not None})
                span.set_attribute("http.response.status_code", status)
                if status >= 400:
                    span.set_attribute("error.type", str(status))
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
            span.end()
        finally:
            otel_context.detach(root.token)  # type: ignore[arg-type]

    def event(self, root: RootSpan, name: str, attributes: dict[str, Any]) -> None:
        if root.span.is_recording():
            root.span.add_event(name, attributes)

    @contextlib.contextmanager
    def attempt(
        self, kind: Kind, engine: str, model: str, pool: str, url: str, headers: dict[str, str]
    ) -> Iterator[Span]:
        """One upstream attempt: a CLIENT span, and its traceparent put into `headers`."""
        op = OPERATION[kind]
        u = urlsplit(url)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": op,
            "gen_ai.provider.name": engine,
            "gen_ai.request.model": model,
            "server.address": u.hostname or "",
            "llmgw.pool": pool,
        }
        if u.port is not None:
            attrs["server.port"] = u.port
        with self._tracer.start_as_current_span(
            f"{op} {model}", kind=SpanKind.CLIENT, attributes=attrs, record_exception=False
        ) as span:
            self._propagator.inject(headers)
            try:
                yield span
            except BaseException as exc:
                # The pool's HTTP status when there is one (a GatewayError or a wrapper holding one).
                err = getattr(exc, "error", exc)
                span.set_attribute("error.type", str(getattr(err, "status", type(err).__name__)))
                raise
