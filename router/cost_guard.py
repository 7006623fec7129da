"""The cost guard: keeps the cascade's realized cost at or under a budget (a share of what strong-only
routing would have cost on the same tokens) from the first request on. Pure: the caller reports each
finished request and applies `threshold_offset(...)` to the request's `Cascade.judge`.

The offset is subtracted from every scorer's accept threshold, so a positive offset accepts more cheap
answers (fewer escalations). Three parts, each for a regime the others miss:

- **Cold-start prior** (`CostPrior`): the offset at which the cascade's cost share on calibration data
  (rows replayed at every offset of a grid when the alias is fitted, `llmgw cascade fit-prior`) meets
  the budget. The guard starts there instead of at 0, so the first requests escalate at about the rate
  the budget affords rather than at the configured, unbudgeted, rate.
- **Integral controller**: integrates the error between the recent cost share (last `window` requests)
  or the running total, whichever is higher, and the budget less `margin`, clipped to [0, max_offset]:
  it corrects the prior for traffic unlike the calibration data. At 0 the cascade runs exactly as
  configured, so the guard never spends more than the configuration would.
- **Budget ledger**: an escalation is allowed only when the running cost, plus this request's cost if
  it escalates, stays within budget x (strong-only cost so far + this request's). Otherwise the offset
  is `math.inf`: every scorer accepts and the best cheap answer is the answer. The prior and the
  controller only aim; the ledger is what holds the bound in the small-sample regime, where one
  escalation moves the share by many points.

The bound (tested as a property in tests/unit/routing/test_cost_guard.py): when the caller passes each
request's worst-case costs and no request's first step alone costs more than (budget + TOLERANCE) of its
strong-only cost, the realized share after every request, of a run of any length, is <= budget +
TOLERANCE. The ledger itself keeps escalations within `budget`; TOLERANCE is the slack left for first
steps the guard cannot refuse (they are made before anything is judged). Without the costs
(`threshold_offset()` with no arguments) the ledger uses the largest costs of the last `window` requests
as the worst case: a request costlier than any recent one can overshoot, so that is an estimate, not a
bound.

Per request:  offset = guard.threshold_offset(escalation_cost, strong_cost)
              decision = cascade.judge(..., threshold_offset=offset); ...
              guard.record(cost_usd, strong_cost_usd, escalated)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from router.config import Cascade as CascadeConfig

__all__ = [
    "MISCALIBRATED_MIN_REQUESTS",
    "PRIOR_FORMAT",
    "SHIPPED_PRIORS",
    "TOLERANCE",
    "CostGuard",
    "CostPrior",
    "CostPriorError",
    "cascade_key",
    "shipped_prior",
]

# Below this many requests an escalation rate is too noisy to say the scorer rejects nearly
# everything: the gauge stays NaN until then. The alert itself (LLMGatewayCascadeRejectsNearlyAll, the
# chart's files/alerts/gateway.yaml) is computed from the decision counters of every cascade.
MISCALIBRATED_MIN_REQUESTS = 100

# The stated tolerance of the bound (share points of strong-only cost): see the module docstring.
TOLERANCE = 0.02

PRIOR_FORMAT = "llmgw-cost-prior/1"
SHIPPED_PRIORS = "cost_priors.json"


class CostPriorError(ValueError):
    """A corrupt cost-prior file or entry; the message says which and why."""


@dataclass(frozen=True, slots=True)
class CostPrior:
    """The cascade's cost share (of strong-only) and escalation rate on calibration rows, per offset."""

    offsets: tuple[float, ...]  # increasing, the first 0
    cost_shares: tuple[float, ...]
    escalation_rates: tuple[float, ...]
    rows: int  # calibration rows behind the figures
    data: tuple[str, ...] = ()  # what they were (file names): a prior must not be judged on its own rows

    def __post_init__(self) -> None:
        n = len(self.offsets)
        if n == 0 or len(self.cost_shares) != n or len(self.escalation_rates) != n:
            raise CostPriorError("a cost prior needs offsets, cost_shares and escalation_rates of one length")
        values = (*self.offsets, *self.cost_shares, *self.escalation_rates)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise CostPriorError("cost prior figures must be finite and >= 0")
        if any(b <= a for a, b in zip(self.offsets, self.offsets[1:], strict=False)):
            raise CostPriorError("cost prior offsets must increase")
        if self.rows < 1:
            raise CostPriorError("a cost prior rests on at least one row")

    def offset_for(self, target: float) -> float:
        """The smallest offset whose calibration cost share is <= `target` (the largest if none is):
        the least the thresholds must be lowered, so quality is given up only as far as the budget asks."""
        return next(
            (o for o, s in zip(self.offsets, self.cost_shares, strict=True) if s <= target), self.offsets[-1]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "offsets": [round(o, 6) for o in self.offsets],
            "cost_shares": [round(s, 6) for s in self.cost_shares],
            "escalation_rates": [round(e, 6) for e in self.escalation_rates],
            "rows": self.rows,
            "data": list(self.data),
        }

    @classmethod
    def from_dict(cls, raw: object, source: str) -> CostPrior:
        if not isinstance(raw, dict):
            raise CostPriorError(f"{source}: a cost prior is an object")
        try:
            return cls(
                offsets=_floats(raw["offsets"]),
                cost_shares=_floats(raw["cost_shares"]),
                escalation_rates=_floats(raw["escalation_rates"]),
                rows=int(raw["rows"]),
                data=tuple(str(d) for d in raw.get("data", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CostPriorError(f"{source}: not a cost prior ({exc})") from exc


def _floats(raw: object) -> tuple[float, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, int | float) for v in raw):
        raise TypeError("expected a list of numbers")
    return tuple(float(v) for v in raw)


def cascade_key(tiers: Sequence[str], cascade: CascadeConfig) -> str:
    """What a prior is fitted for: the tiers' pools and what decides escalation (scorers, thresholds,
    artifacts, steps). Not the budget or the stream mode: the prior's figures do not depend on them."""
    scorers = [
        {
            k: v
            for k, v in s.model_dump(mode="json").items()
            if k in ("kind", "accept_threshold", "artifact", "mode", "reduce")
        }
        for s in cascade.scorers
    ]
    body = {"tiers": list(tiers), "scorers": scorers, "max_escalations": cascade.max_escalations}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def read_priors(text: str, source: str) -> dict[str, dict[str, Any]]:
    """The entries of a priors file: key -> {"alias", "tiers", "prior"} (see `cascade_key`)."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CostPriorError(f"{source}: not JSON ({exc})") from exc
    if (
        not isinstance(body, dict)
        or body.get("format") != PRIOR_FORMAT
        or not isinstance(body.get("priors"), dict)
    ):
        raise CostPriorError(f"{source}: not a cost-prior file (format {PRIOR_FORMAT})")
    priors: dict[str, dict[str, Any]] = body["priors"]
    for key, entry in priors.items():
        if not isinstance(entry, dict):
            raise CostPriorError(f"{source}: entry {key} is not an object")
        CostPrior.from_dict(entry.get("prior"), f"{source}: {key}")  # refuse a corrupt file whole
    return priors


def write_priors(priors: dict[str, dict[str, Any]]) -> str:
    """A priors file: one entry per line (readable diffs: a refit changes its alias's line only)."""
    lines = [f"  {json.dumps(k)}: {json.dumps(priors[k], sort_keys=True)}" for k in sorted(priors)]
    return f'{{"format": "{PRIOR_FORMAT}", "priors": {{\n' + ",\n".join(lines) + "\n}}\n"


def shipped_prior(
    tiers: Sequence[str], cascade: CascadeConfig, path: str | Path | None = None
) -> CostPrior | None:
    """The prior fitted for this cascade, from `path` or router/scorer_artifacts/cost_priors.json;
    None when none was fitted for it (the guard then starts at offset 0, as configured)."""
    if path is None:
        source = f"router/scorer_artifacts/{SHIPPED_PRIORS}"
        try:
            text = (resources.files("router.scorer_artifacts") / SHIPPED_PRIORS).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
    else:
        source = str(path)
        text = Path(path).read_text(encoding="utf-8")
    entry = read_priors(text, source).get(cascade_key(tiers, cascade))
    return None if entry is None else CostPrior.from_dict(entry["prior"], source)


class CostGuard:
    def __init__(
        self,
        budget: float,
        window: int = 200,
        rate: float = 0.01,
        margin: float = 0.02,
        max_offset: float = 1.0,
        prior: CostPrior | None = None,
    ) -> None:
        if not 0.0 < budget <= 1.0:
            raise ValueError("cost budget is a share of strong-only cost in (0, 1]")
        if window < 1 or rate <= 0 or margin < 0 or max_offset < 0:
            raise ValueError("window >= 1, rate > 0, margin >= 0, max_offset >= 0")
        self.budget, self.rate, self.margin, self.max_offset = budget, rate, margin, max_offset
        # The last `window` requests, one deque per column: `sum` over a deque of floats runs in C
        # (a generator over tuples cost ~10 us per request); escalations are counted as they come.
        self._costs: deque[float] = deque(maxlen=window)
        self._strongs: deque[float] = deque(maxlen=window)
        self._escalated: deque[bool] = deque(maxlen=window)
        # The ledger's worst case without costs: the window's largest strong cost, largest cost and
        # largest unescalated cost (a first step), kept as they come (max over the window cost 15 us).
        self._max_strong, self._max_cost, self._max_first = (_SlidingMax(window) for _ in range(3))
        self._escalations = 0
        self._cost = self._strong = 0.0
        # Aim where the controller aims (budget less margin), so it has nothing to undo at the start.
        start = prior.offset_for(budget - margin) if prior is not None else 0.0
        self.initial_offset = min(max_offset, max(0.0, start))
        self._offset = self.initial_offset

    def threshold_offset(
        self, escalation_cost: float | None = None, strong_cost: float | None = None
    ) -> float:
        """How much to lower every accept threshold for the next request (>= 0; `math.inf` when the
        budget cannot afford its escalation). `escalation_cost`: what the request costs in all if it
        escalates (every step's calls), `strong_cost`: the strong tier alone on it; worst cases (the
        reservation's tokens at each tier's price) make the bound hold. Without them, the largest of the
        last `window` requests stand in (an estimate)."""
        if escalation_cost is None or strong_cost is None:
            if not self._strongs:
                return math.inf  # nothing spent yet: no credit, and no worst case to weigh
            strong_cost = self._max_strong.value()
            escalation_cost = max(self._max_cost.value(), strong_cost + self._max_first.value())
        if not self.affords(escalation_cost, strong_cost):
            return math.inf
        return self._offset

    def affords(self, escalation_cost: float, strong_cost: float) -> bool:
        """Whether a request that costs `escalation_cost` against `strong_cost` strong-only keeps the
        running cost within budget x the running strong-only cost (the ledger)."""
        return self._cost + escalation_cost <= self.budget * (self._strong + strong_cost)

    def record(self, cost: float, strong_cost: float, escalated: bool) -> None:
        """One finished request: its realized cost, the strong tier's price on the same tokens."""
        # NaN would pass a `< 0` check and then poison the totals and the offset for good.
        if not (math.isfinite(cost) and math.isfinite(strong_cost)) or cost < 0 or strong_cost < 0:
            raise ValueError(f"costs must be finite and >= 0, got {cost}, {strong_cost}")
        if len(self._escalated) == self._escalated.maxlen:
            self._escalations -= self._escalated[0]
        self._costs.append(cost)
        self._strongs.append(strong_cost)
        self._escalated.append(escalated)
        self._max_strong.push(strong_cost)
        self._max_cost.push(cost)
        self._max_first.push(0.0 if escalated else cost)
        self._escalations += escalated
        self._cost += cost
        self._strong += strong_cost
        recent = self._share(sum(self._costs), sum(self._strongs))
        if recent is not None:
            # Also steer on the running total so an early overspend is paid back, not just stopped.
            total = self.realized_cost_share()
            assert total is not None
            error = max(recent, total) - (self.budget - self.margin)
            self._offset = min(self.max_offset, max(0.0, self._offset + self.rate * error))

    def realized_cost_share(self) -> float | None:
        """Total realized cost / total strong-only cost so far; None before any priced request."""
        return self._share(self._cost, self._strong)

    def escalation_rate(self) -> float | None:
        """Share of the last `window` requests that escalated; None before any."""
        n = len(self._escalated)
        return self._escalations / n if n else None

    def window_n(self) -> int:
        return len(self._escalated)

    @staticmethod
    def _share(cost: float, strong: float) -> float | None:
        return cost / strong if strong > 0 else None


class _SlidingMax:
    """The largest of the last `window` values pushed, in O(1) amortized per push (a monotonic deque
    of (position, value), values decreasing)."""

    def __init__(self, window: int) -> None:
        self._window, self._n = window, 0
        self._q: deque[tuple[int, float]] = deque()

    def push(self, value: float) -> None:
        while self._q and self._q[-1][1] <= value:
            self._q.pop()
        self._q.append((self._n, value))
        self._n += 1
        if self._q[0][0] <= self._n - 1 - self._window:
            self._q.popleft()

    def value(self) -> float:
        return self._q[0][1] if self._q else 0.0
