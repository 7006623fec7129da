"""Speculative-decoding acceptance of a pool, from vLLM's spec-decode counters (pure).

A vLLM replica started with `--speculative-config` exports four counters (vllm/v1/spec_decode/metrics.py,
shared/reference/vllm.md): `vllm:spec_decode_num_drafts_total` (draft rounds),
`…_num_draft_tokens_total` (proposed tokens), `…_num_accepted_tokens_total` and
`…_num_accepted_tokens_per_pos_total{position="0".."k-1"}`. Counters only grow, so what a pool does
*now* is their increase over a recent window, the way PromQL's `increase()` reads them:

    acceptance ratio       = Δaccepted / Δdraft_tokens          (the engine docstring's "acceptance rate")
    mean acceptance length = 1 + Δaccepted / Δdrafts            (tokens per verification step, bonus incl.)
    position i acceptance  = Δaccepted_at_pos[i] / Δdrafts       (how deep drafts survive)

Each replica keeps a short `SpecHistory` of scraped samples; `SpecHistory.increase` turns it into the
increase over `window_s` (a counter that went down is a restarted replica: its new value is the
increase since the restart, as Prometheus treats resets). A pool's figures sum its replicas'
increases before dividing, so a busy replica weighs more than an idle one.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_WINDOW_S = 60.0  # the acceptance window when the policy says none (speculative.acceptance_window_s)
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Cumulative (as scraped) or an increase over a window; `per_position[i]` is position i."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: tuple[float, ...] = ()

    def since(self, older: SpecCounters) -> SpecCounters:
        """The increase from `older` to this sample, reset-aware per counter."""

        def inc(new: float, old: float) -> float:
            return new - old if new >= old else new  # went down: the replica restarted

        olds = older.per_position + (0.0,) * max(0, len(self.per_position) - len(older.per_position))
        return SpecCounters(
            inc(self.drafts, older.drafts),
            inc(self.draft_tokens, older.draft_tokens),
            inc(self.accepted, older.accepted),
            tuple(inc(n, o) for n, o in zip(self.per_position, olds, strict=False)),
        )

    def plus(self, other: SpecCounters) -> SpecCounters:
        a, b = self.per_position, other.per_position
        n = max(len(a), len(b))
        a, b = a + (0.0,) * (n - len(a)), b + (0.0,) * (n - len(b))
        return SpecCounters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            tuple(x + y for x, y in zip(a, b, strict=True)),
        )

    def minus(self, earlier: SpecCounters, positions: int) -> SpecCounters:
        """Plain difference of two running totals (no reset logic: `since` applied it), with the
        first `positions` per-position counters."""
        olds = earlier.per_position + (0.0,) * max(0, positions - len(earlier.per_position))
        return SpecCounters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            tuple(n - o for n, o in zip(self.per_position[:positions], olds, strict=False)),
        )


@dataclass(frozen=True, slots=True)
class SpecFigures:
    """What the gateway exports per pool; None fields would be 0/0, so there are none: no drafts, no
    figures (`figures` returns None)."""

    increase: SpecCounters
    acceptance_ratio: float  # accepted / draft tokens, 0..1
    mean_acceptance_length: float  # 1 + accepted / drafts, 1..k+1
    position_acceptance: tuple[float, ...]  # accepted at position i / drafts, 0..1


def figures(increase: SpecCounters) -> SpecFigures | None:
    """Acceptance figures of an increase; None when no draft was proposed in it."""
    if increase.drafts <= 0 or increase.draft_tokens <= 0:
        return None
    return SpecFigures(
        increase=increase,
        acceptance_ratio=increase.accepted / increase.draft_tokens,
        mean_acceptance_length=1.0 + increase.accepted / increase.drafts,
        position_acceptance=tuple(a / increase.drafts for a in increase.per_position),
    )


def window_increase(
    samples: Iterable[tuple[float, SpecCounters]], now: float, window_s: float
) -> SpecCounters | None:
    """The increase over the last `window_s` seconds of time-ordered (at, cumulative) samples
    (`SpecHistory.increase`; this keeps them all)."""
    h = SpecHistory()
    for at, counters in samples:
        h.add(at, counters, math.inf)
    return h.increase(now, window_s)


def pool_figures(histories: Iterable[SpecHistory], now: float, window_s: float) -> SpecFigures | None:
    """A pool's figures: its replicas' increases summed, then divided."""
    total: SpecCounters | None = None
    for h in histories:
        inc = h.increase(now, window_s)
        if inc is not None:
            total = inc if total is None else total.plus(inc)
    return None if total is None else figures(total)


@dataclass(slots=True)
class SpecHistory:
    """A replica's scraped spec-decode samples, oldest first, trimmed to what a window can still use.

    Beside each sample it keeps the running total of the increases up to it (reset-aware, `since`), so
    the increase over a window is one subtraction of two totals: this is read per request."""

    samples: deque[tuple[float, SpecCounters]] = field(default_factory=deque)
    _totals: deque[SpecCounters] = field(default_factory=deque)
    _widths: deque[int] = field(default_factory=deque)  # positions each sample reports

    def add(self, at: float, counters: SpecCounters, keep_s: float) -> None:
        samples, totals, widths = self.samples, self._totals, self._widths
        totals.append(totals[-1].plus(counters.since(samples[-1][1])) if samples else SpecCounters())
        samples.append((at, counters))
        widths.append(len(counters.per_position))
        # Keep one sample at or before (at - keep_s): the baseline `increase` needs.
        while len(samples) >= 2 and samples[1][0] <= at - keep_s:
            samples.popleft()
            totals.popleft()
            widths.popleft()

    def increase(self, now: float, window_s: float) -> SpecCounters | None:
        """The increase over the last `window_s` seconds before `now`.

        The baseline is the newest sample at or before the window's start (so the increase covers the
        whole window, not just the samples inside it), else the oldest one; samples after `now` are
        not used; None with fewer than two samples usable. A reset in the middle is counted right."""
        samples = self.samples
        last = bisect.bisect_right(samples, now, key=_at) - 1
        base = max(0, bisect.bisect_right(samples, now - window_s, key=_at, hi=last + 1) - 1)
        if last - base < 1:
            return None
        # As many positions as the window's samples report (an older, longer sample adds none).
        positions = max(itertools.islice(self._widths, base + 1, last + 1))
        return self._totals[last].minus(self._totals[base], positions)


def _at(sample: tuple[float, SpecCounters]) -> float:
    return sample[0]


def parse_line(name: str, labels: str, value: float, into: dict[str, float], pos: dict[int, float]) -> None:
    """Accumulate one sample of a spec-decode family (summed over engines) into `into`/`pos`."""
    if name == ACCEPTED_PER_POS:
        at = labels.find('position="')
        if at < 0:
            return
        digits = labels[at + 10 : labels.find('"', at + 10)]
        if digits.isdigit():
            pos[int(digits)] = pos.get(int(digits), 0.0) + value
    else:
        into[name] = into.get(name, 0.0) + value


def counters_of(into: dict[str, float], pos: dict[int, float]) -> SpecCounters | None:
    """The parsed counters; None when the page has no spec-decode family (no speculative config)."""
    if DRAFTS not in into and DRAFT_TOKENS not in into:
        return None
    depth = max(pos) + 1 if pos else 0
    return SpecCounters(
        into.get(DRAFTS, 0.0),
        into.get(DRAFT_TOKENS, 0.0),
        into.get(ACCEPTED, 0.0),
        tuple(pos.get(i, 0.0) for i in range(depth)),
    )
