"""Counters, gauges and histograms for the hot path: plain numbers per request, prometheus_client at scrape.

prometheus_client's `inc`/`observe` do their bookkeeping on every call: an observability check (two
calls), an amount check, a `threading.Lock` around the add, and for a histogram a Python loop over the
buckets. A request touches about fifteen such series (requests, durations, overhead, tokens, cost,
limiter decisions): measured with an opcode count per request (docs/performance.md), that was ~15 % of
the gateway's Python work per request. These classes keep one number per labelled child (a slot
increment; a histogram bins with `bisect`) and hand the values to prometheus_client's own metric
families when `/metrics` is scraped, so the exposition format stays the library's.

They are drop-ins for the parts of prometheus_client's API the gateway uses: `Counter`, `Gauge` and
`Histogram` with `labels(*values)`, `inc`, `dec`, `set`, `observe`, registered on a `CollectorRegistry`.
Every update happens on the event loop's thread (the one thread that serves requests and scrapes), so
no lock is needed; a series updated from another thread must keep prometheus_client's classes.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import INF, floatToGoString


class CounterChild:
    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class GaugeChild:
    __slots__ = ("value", "fn")

    def __init__(self) -> None:
        self.value = 0.0
        self.fn: Callable[[], float] | None = None  # set_function: the value, read at scrape

    def set_function(self, fn: Callable[[], float]) -> None:
        self.fn = fn

    def read(self) -> float:
        return self.value if self.fn is None else float(self.fn())

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds  # finite upper bounds, ascending; the last count is +Inf's
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # bisect_left: a value equal to a bound falls in that bucket (`le` is inclusive).
        self.counts[bisect_left(self._bounds, amount)] += 1
        self.sum += amount


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class _Family(Collector, Generic[C]):
    """One metric name, its label names and its children (label values -> child); a metric without
    labels has one child of its own (`_solo`), which its `inc`/`observe`/... update."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str],
        registry: CollectorRegistry | None,
        unit: str,
    ) -> None:
        self._name = name
        self._unit = unit  # appended to the name by the family, as prometheus_client does
        self._doc = documentation
        self._labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], C] = {}
        self._solo: C | None = None if self._labelnames else self._child()
        if registry is not None:
            registry.register(self)

    def _child(self) -> C:
        raise NotImplementedError

    def labels(self, *values: str) -> C:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: expected labels {self._labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child()
        return child

    def _only(self) -> C:
        if self._solo is None:
            raise ValueError(f"{self._name} has labels: use labels(...)")
        return self._solo

    def _each(self) -> list[tuple[tuple[str, ...], C]]:
        solo = [((), self._solo)] if self._solo is not None else []
        return solo + list(self._children.items())

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def _family(self) -> Metric:
        raise NotImplementedError


class Counter(_Family[CounterChild]):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        unit: str = "",
    ) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry, unit)

    def _child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._doc, labels=self._labelnames, unit=self._unit)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, child in self._each():
            family.add_metric(key, child.value, created=child.created)
        yield family


class Gauge(_Family[GaugeChild]):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        unit: str = "",
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, unit)

    def _child(self) -> GaugeChild:
        return GaugeChild()

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self._name, self._doc, labels=self._labelnames, unit=self._unit)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, child in self._each():
            family.add_metric(key, child.read())
        yield family


# prometheus_client's default buckets
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Histogram(_Family[HistogramChild]):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] = _BUCKETS,
        unit: str = "",
    ) -> None:
        bounds = sorted(float(b) for b in buckets if float(b) != INF)
        if len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: duplicate bucket bounds")
        self._bounds = tuple(bounds)
        self._les: list[str] = [floatToGoString(b) for b in (*self._bounds, INF)]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry, unit)

    def _child(self) -> HistogramChild:
        return HistogramChild(self._bounds)

    def observe(self, amount: float) -> None:
        self._only().observe(amount)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self._name, self._doc, labels=self._labelnames, unit=self._unit)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, child in self._each():
            cumulative, buckets = 0, []
            for le, n in zip(self._les, child.counts, strict=True):
                cumulative += n
                buckets.append((le, float(cumulative)))
            family.add_metric(key, buckets, child.sum)
            family.add_sample(
                family.name + "_created", dict(zip(self._labelnames, key, strict=True)), child.created
            )
        yield family
