"""Live calibration of the difficulty cut: the cut that sends `target` of the deployment's own traffic to
the strong tier, learnt from the difficulty scores the router sees (pure; no I/O, no clock).

Two DDSketches rotate every `window` observations (the older one is dropped), so the cut follows
drift while always resting on at least `window` recent scores. The cut is the quantile
1 - target + gain * (realized - target) of the merged sketches: the feedback term corrects the share
actually routed strong (estimated over the last `feedback` requests) for the lag of the sketch. Replicas share
sketches: each publishes `to_bytes()` (its own recent scores only) and calls `merge_bytes` with its
peers' blobs, which replaces the previously merged peer state, so nothing is counted twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ddsketch import DDSketch
from ddsketch.pb.ddsketch_pb2 import DDSketch as DDSketchPb
from ddsketch.pb.proto import DDSketchProto

__all__ = ["LiveCalibration"]

_ACCURACY = 0.01  # relative accuracy of the sketch; difficulty lives in (0, 1]
_OFFSET = 1.0  # DDSketch is relative-error: shift [0, 1] away from 0 so low scores keep resolution


class LiveCalibration:
    def __init__(
        self,
        target: float,
        window: int = 1000,
        min_samples: int = 200,
        gain: float = 4.0,
        feedback: int = 100,
    ) -> None:
        if not 0.0 < target < 1.0:
            raise ValueError("target strong share must be in (0, 1)")
        if window < 1 or min_samples < 1 or gain < 0:
            raise ValueError("window and min_samples must be >= 1, gain >= 0")
        self.target, self.window, self.min_samples, self.gain = target, window, min_samples, gain
        self._current, self._previous = DDSketch(_ACCURACY), DDSketch(_ACCURACY)
        self._peers: DDSketch | None = None
        # previous + current + peers, kept up to date by `observe` (rebuilt, by `_merged_sketch`, once
        # per rotation or peers' merge): merging sketches per request cost ~20 us of the hot path.
        self._merged: DDSketch | None = None
        self._merged_peers: DDSketch | None = None
        # Last `feedback` requests at/above their cut: short, so the term reacts within a window.
        self._routed: deque[bool] = deque(maxlen=feedback)
        self._routed_strong = 0  # how many of `_routed` are True
        self._cut: float | None = None

    def observe(self, difficulty: float) -> None:
        """Record one request's difficulty; call it after routing it with the `cut()` of that moment."""
        if self._cut is not None:
            routed = self._routed
            if len(routed) == routed.maxlen:
                self._routed_strong -= routed[0]
            strong = difficulty >= self._cut
            routed.append(strong)
            self._routed_strong += strong
        value = difficulty + _OFFSET
        self._current.add(value)
        if self._current.count >= self.window:
            self._previous, self._current = self._current, DDSketch(_ACCURACY)
            self._merged = None  # the oldest window is dropped: rebuild from the sketches
        elif self._merged is not None:
            self._merged.add(value)
        self._cut = self._compute_cut()

    def cut(self) -> float | None:
        """Strong when difficulty >= cut; None until `min_samples` scores are known (use the artifact's)."""
        return self._cut

    def realized_strong_share(self) -> float | None:
        """Share of the last `feedback` requests routed strong under the live cut; None before any."""
        return self._routed_strong / len(self._routed) if self._routed else None

    def to_bytes(self) -> bytes:
        """This replica's own recent scores (both sketches), for peers' `merge_bytes`."""
        own = self._own()
        pb = DDSketchProto.to_proto(own)  # type: ignore[no-untyped-call]
        return bytes(pb.SerializeToString())

    def merge_bytes(self, blobs: Iterable[bytes]) -> None:
        """Replace the peers' state with these blobs (each from a peer's `to_bytes`); a blob that is not
        a sketch (they come from Redis) is skipped."""
        peers: DDSketch | None = None
        for blob in blobs:
            pb = DDSketchPb()
            try:
                pb.ParseFromString(blob)
                sketch = DDSketchProto.from_proto(pb)  # type: ignore[no-untyped-call]
            except Exception:  # protobuf's DecodeError, or a message that is no DDSketch
                continue
            if not sketch.count:
                continue
            if peers is None:
                peers = DDSketch(_ACCURACY)
            peers.merge(sketch)
        self._peers = peers
        self._cut = self._compute_cut()

    def _own(self) -> DDSketch:
        own = DDSketch(_ACCURACY)
        for s in (self._previous, self._current):
            if s.count:
                own.merge(s)
        return own

    def _merged_sketch(self) -> DDSketch:
        """Own sketches and the peers' merged, rebuilt only after a rotation or a new peers' state."""
        if self._merged is None or self._merged_peers is not self._peers:
            merged = self._own()
            if self._peers is not None and self._peers.count:
                merged.merge(self._peers)
            self._merged, self._merged_peers = merged, self._peers
        return self._merged

    def _compute_cut(self) -> float | None:
        merged = self._merged_sketch()
        if merged.count < self.min_samples:
            return None
        realized = self.realized_strong_share()
        error = 0.0 if realized is None else realized - self.target
        q = min(1.0, max(0.0, 1.0 - self.target + self.gain * error))
        value = merged.get_quantile_value(q)
        return None if value is None else float(value) - _OFFSET
