"""gateway.observability.lean exposes exactly what prometheus_client's own classes would, for the same
updates (differential: both registries are rendered and compared, `_created` timestamps aside)."""

from __future__ import annotations

import re

import prometheus_client as pc
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.observability import lean

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def _render(registry: CollectorRegistry) -> str:
    text = generate_latest(registry).decode()
    # Creation times differ between the two registries by construction.
    return re.sub(r"(_created\{?[^ ]*\}? )\S+", r"\1T", text)


def _exercise(mod: object, registry: CollectorRegistry) -> None:
    counter = mod.Counter("t_requests", "requests", ["model", "code"], registry=registry)  # type: ignore[attr-defined]
    solo = mod.Counter("t_solo_total", "a counter without labels", registry=registry)  # type: ignore[attr-defined]
    usd = mod.Counter("t_cost", "spend", ["org"], registry=registry, unit="usd")  # type: ignore[attr-defined]
    gauge = mod.Gauge("t_inflight", "in flight", ["pool"], registry=registry)  # type: ignore[attr-defined]
    fn_gauge = mod.Gauge("t_share", "computed at scrape", ["alias"], registry=registry)  # type: ignore[attr-defined]
    hist = mod.Histogram("t_seconds", "latency", ["endpoint"], buckets=BUCKETS, registry=registry)  # type: ignore[attr-defined]
    solo_hist = mod.Histogram("t_backend_seconds", "backend", buckets=BUCKETS, registry=registry)  # type: ignore[attr-defined]
    counter.labels("small", "200").inc()
    counter.labels("small", "200").inc(2)
    counter.labels("large", "429").inc(0.5)
    solo.inc()
    usd.labels("acme").inc(0.25)
    child = gauge.labels("small")
    child.inc()
    child.inc(3)
    child.dec()
    gauge.labels("large").set(7)
    fn_gauge.labels("auto").set_function(lambda: 0.4)
    for v in (0.0005, 0.001, 0.002, 0.01, 0.5, 3.0):  # on a bound, between bounds, past the last
        hist.labels("chat").observe(v)
    hist.labels("messages").observe(0.05)
    solo_hist.observe(0.0001)


def test_lean_metrics_render_what_prometheus_client_renders() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    _exercise(lean, ours)
    _exercise(pc, theirs)
    assert _render(ours) == _render(theirs)


def test_a_counter_refuses_a_negative_increment_and_labels_are_checked() -> None:
    counter = lean.Counter("t_c", "c", ["a"], registry=CollectorRegistry())
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
    with pytest.raises(ValueError):
        counter.inc()  # labelled: only its children count


def test_a_name_registered_twice_is_refused() -> None:
    registry = CollectorRegistry()
    lean.Counter("t_dup", "first", registry=registry)
    with pytest.raises(ValueError):
        lean.Counter("t_dup", "second", registry=registry)
