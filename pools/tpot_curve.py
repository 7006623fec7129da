"""A pool's observed TPOT as a function of its running batch, learnt from scrapes (for the speculative
routing rule's learned switch point, `router.speculative.learned_switch_point`).

Between two scrapes of a replica, `vllm:request_time_per_output_token_seconds` (_sum, _count) says
the mean TPOT of the requests that finished in between, and `vllm:num_requests_running` at both ends
bounds the batch they ran in. Each such pair is one observation (mean of the two running counts,
Δsum / Δcount) put into a batch bin: half powers of two (1, 2, 4, 5, 8, 11, 16, 22, 32, ...), fine
enough to place a switch point, coarse enough to fill with a few scrapes each. A bin keeps an EWMA
(recent behaviour: an engine upgrade or a new workload moves the curve) and its count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ALPHA = 0.2  # EWMA weight of a new observation: ~the last 5 scrape intervals of a bin


def batch_bin(batch: float) -> int:
    """The bin of a running batch: the largest half power of two not above it (at least 1)."""
    if batch < 1.0:
        return 1
    return max(1, int(2 ** (math.floor(2 * math.log2(batch)) / 2)))


@dataclass(slots=True)
class TpotCurve:
    bins: dict[int, tuple[float, int]] = field(default_factory=dict)  # bin -> (EWMA TPOT s, count)
    _last: tuple[float, float, float] | None = None  # (running, tpot sum, tpot count) of the last scrape

    def observe_scrape(self, running: float, tpot_sum: float, tpot_count: float) -> None:
        last, self._last = self._last, (running, tpot_sum, tpot_count)
        if last is None or tpot_count <= last[2] or tpot_sum < last[1]:
            return  # nothing finished in between, or the replica restarted
        mean = (tpot_sum - last[1]) / (tpot_count - last[2])
        b = batch_bin((running + last[0]) / 2)
        old = self.bins.get(b)
        self.bins[b] = (mean, 1) if old is None else (old[0] + ALPHA * (mean - old[0]), old[1] + 1)


def pool_curve(curves: Iterable[TpotCurve], min_count: int = 3) -> Mapping[int, float]:
    """A pool's curve: each bin's replica EWMAs weighted by their counts; bins seen fewer than
    `min_count` times are left out; then made non-decreasing in the batch (`monotone`)."""
    sums: dict[int, tuple[float, int]] = {}
    for c in curves:
        for b, (tpot, n) in c.bins.items():
            s, m = sums.get(b, (0.0, 0))
            sums[b] = (s + tpot * n, m + n)
    return monotone({b: (s / n, n) for b, (s, n) in sums.items() if n >= min_count})


def monotone(bins: Mapping[int, tuple[float, int]]) -> dict[int, float]:
    """The count-weighted isotonic fit (pool adjacent violators) of (bin -> (TPOT, count)).

    A larger batch never decodes faster per token; a bin that reads slower than a bigger one is noise
    (a burst of long prompts in a few scrapes), and left alone it makes the routing rule send requests
    to the plain pool at a load where speculation is clearly better."""
    blocks: list[list[float]] = []  # [sum of tpot x count, count, number of bins]
    for b in sorted(bins):
        tpot, count = bins[b]
        blocks.append([tpot * count, float(count), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            top = blocks.pop()
            for i in range(3):
                blocks[-1][i] += top[i]
    out: dict[int, float] = {}
    keys = iter(sorted(bins))
    for total, n, width in blocks:
        for _ in range(int(width)):
            out[next(keys)] = total / n
    return out


def expected_tpot(curve: Mapping[int, float], batch: float) -> float | None:
    """The curve's TPOT at `batch`'s bin, else at the nearest bin seen (by ratio: a pool idle at
    batch 1 is read from its lowest bin); None for an empty curve."""
    if not curve:
        return None
    b = batch_bin(batch)
    if b in curve:
        return curve[b]
    nearest = min(curve, key=lambda k: (abs(math.log(k / b)), k))
    return curve[nearest]
