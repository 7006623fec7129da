"""`python -m eval.bench.overhead.observe_cost` (`make bench-observe`): the CPU the observability hooks
add per request.

Runs the per-request hooks the relay calls (`Observer.start`, the `auth` / `rate_limit` child-span
sites, `Observer.begin`, `Observer.finish`: SLO verdict, cost, accepted output, feedback memory, and
optionally the request log and traces) in a loop, in process, with no network: the figure is the
CPU cost itself, free of the socket noise that dominates `make bench-overhead`'s percentiles. Reports
the best and median of 5 repeats in microseconds per request, for: the default (goodput + cost, log
and traces off), the request log (to /dev/null), the log with redacted text, and traces (root span +
two child spans, batched to an exporter that drops them). A report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from gateway.config import parse_policy
from gateway.edge.exchange import Exchange, Kind, RequestHeaders
from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.observability.otel import Tracing
from gateway.observability.request_log import RequestLog
from gateway.record import Answer, RequestRecord
from gateway.tenancy.auth import Principal
from ratelimit.model import Tenant

POLICY = """\
pools:
  - {name: small, model: m, endpoints: {static: ["http://127.0.0.1:1"]},
     price: {input_per_mtok: 1, output_per_mtok: 2}}
models:
  - {name: small, route: {pool: small}, slo_class: interactive}
slo_classes:
  interactive: {ttft_ms: 450, tpot_ms: 40}
"""
VARIANTS = ("default", "log", "log+text", "tracing")
_WHO = Principal(Tenant(key_id="k", app="a", org="acme", tier="standard"), "k")
_BODY = {
    "model": "small",
    "messages": [{"role": "user", "content": "hello there, mail me at ada@example.com"}],
    "stream": True,
    "max_tokens": 64,
}
_HEADERS = [(b"authorization", b"Bearer sk-x"), (b"content-type", b"application/json")]
_PARSED = RequestHeaders({"headers": _HEADERS})
_CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"call 555 123 4567"}}]}\n\n'


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _observer(variant: str) -> Observer:
    policy = parse_policy(POLICY, "bench")
    log: RequestLog | None = None
    tracing: Tracing | None = None
    if variant.startswith("log"):
        logger = logging.getLogger(f"llmgw.bench.{variant}")
        logger.handlers[:] = [logging.FileHandler("/dev/null")]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        log = RequestLog(logger, text=variant == "log+text")
    if variant == "tracing":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=1 << 17))
        tracing = Tracing(provider)
    return Observer(policy, Metrics(policy), request_log=log, tracing=tracing)


async def _per_request_us(variant: str, n: int, repeats: int) -> list[float]:
    obs = _observer(variant)
    trace = obs.tracing
    keep_text = obs.log is not None and obs.log.text  # the relay keeps the answer's bytes then
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            req = RequestRecord(Exchange(b"req_%08x" % i, Kind.CHAT, _PARSED, t0))
            obs.start(req, Kind.CHAT, _HEADERS)
            with trace.span("auth"):
                pass
            req.who = _WHO
            obs.begin(req, Kind.CHAT, _BODY)
            with trace.span("rate_limit"):
                pass
            answer = req.answer = Answer(None, [] if keep_text else None)
            if answer.capture is not None:
                answer.capture.append(_CHUNK)
            answer.usage_in, answer.usage_out, answer.ttft, answer.tpot = 20, 64, 0.1, 0.02
            req.http.status, req.http.stream, req.http.e2e = 200, True, 1.5
            obs.finish(req, "small", "small", None)
        out.append((time.perf_counter() - t0) / n * 1e6)
    return out


async def _main(n: int, repeats: int) -> None:
    t0 = time.perf_counter()
    for _ in range(n):
        RequestRecord(Exchange(b"", Kind.CHAT, _PARSED, t0))
    base = (time.perf_counter() - t0) / n * 1e6
    print(f"per request, microseconds; the request record alone {base:.2f} us")
    print(f"{'variant':10s} {'best':>8s} {'median':>10s}")
    for v in VARIANTS:
        runs = await _per_request_us(v, n // 4 if v == "tracing" else n, repeats)
        print(f"{v:10s} {min(runs):8.2f} {statistics.median(runs):10.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench.overhead.observe_cost", description=__doc__)
    p.add_argument("--requests", type=int, default=20000, help="requests per repeat (traces: a quarter)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    asyncio.run(_main(args.requests, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
