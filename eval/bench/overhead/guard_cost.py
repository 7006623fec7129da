"""`python -m eval.bench.overhead.guard_cost`: the CPU the input guardrails add per request, in process.

Runs the relay's guardrail stage (`InputGuard`: plan lookup, screen, events) over typical request bodies
in a loop, with no network, every input guardrail on (each detector in redact mode, a size limit, an
allowed-tools list), and the same with no guardrail configured (the lookup alone, what "off" costs).
Reports P50 / P99 of single calls in microseconds, per body. `make bench-overhead BENCH_ARGS=
"--guardrails --before ."` measures the same end to end through a real gateway (docs/design/025);
this is the figure free of the socket noise. A report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import time
from collections.abc import Sequence
from typing import Any

from eval.bench.overhead.policy import GUARDRAILS_YAML
from gateway.config import parse_policy
from gateway.edge.exchange import Exchange, Kind, RequestHeaders
from gateway.guardrails.plan import GuardTable
from gateway.guardrails.stage import InputGuard
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import NoTracing
from gateway.record import RequestRecord
from gateway.tenancy.auth import Principal
from ratelimit.model import Tenant

POLICY = """\
pools:
  - {name: m, model: m, endpoints: {static: ["http://127.0.0.1:1"]}}
models:
  - {name: m, route: {pool: m}}
tenancy: {auth: disabled}
"""
_DOC = (
    "The quarterly report shows revenue growth of 12 percent, driven by the new subscription tier. "
    "Customer churn fell to 3.1 percent; support tickets per customer fell as well. "
) * 12
BODIES: dict[str, dict[str, Any]] = {
    "bench (short chat)": {
        "model": "m",
        "messages": [{"role": "user", "content": "Say hello in one short sentence, please."}],
    },
    "system + 2 KB document": {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You summarise documents for busy executives. Be brief."},
            {"role": "user", "content": "Summarise this:\n\n" + _DOC},
        ],
    },
    "agent turn with a tool result": {
        "model": "m",
        "messages": [
            {"role": "user", "content": "What's the weather in Oslo tomorrow?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
            {
                "role": "tool",
                "content": '{"city": "Oslo", "forecast": "rain", "temp_c": 7, "wind": "12 km/h"}',
            },
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    },
}


async def _record() -> RequestRecord:
    return RequestRecord(Exchange(b"req", Kind.CHAT, RequestHeaders({"headers": []}), 0.0))


def _guard(guardrails: bool) -> InputGuard:
    policy = parse_policy(POLICY + (GUARDRAILS_YAML if guardrails else ""), "guard_cost")
    return InputGuard(GuardTable(policy), Metrics(policy), NoTracing())


def measure(guard: InputGuard, body: dict[str, Any], n: int) -> tuple[float, float]:
    """(P50, P99) microseconds of one stage call on a fresh copy of `body` (the copy is not timed)."""
    req = asyncio.run(_record())
    anonymous = Tenant(key_id="anonymous", app="anonymous", org="anonymous", tier="standard")
    req.who = Principal(anonymous, "anonymous")
    times = []
    for _ in range(n):
        b = copy.deepcopy(body)
        t = time.perf_counter_ns()
        guard.screen(req, Kind.CHAT, "m", b)
        times.append((time.perf_counter_ns() - t) / 1000)
    times.sort()
    return statistics.median(times), times[int(0.99 * (len(times) - 1))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench.overhead.guard_cost", description=__doc__)
    ap.add_argument("-n", type=int, default=20000, help="calls per body and variant")
    args = ap.parse_args(argv)
    on, off = _guard(True), _guard(False)
    print(f"{'body':<32} {'off P50':>8} {'on P50':>8} {'on P99':>8}   (microseconds per request)")
    for name, body in BODIES.items():
        off50, _ = measure(off, body, args.n)
        on50, on99 = measure(on, body, args.n)
        print(f"{name:<32} {off50:>8.2f} {on50:>8.2f} {on99:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
