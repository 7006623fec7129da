"""The usage a pool reports, checked before anything is charged or counted (docs/design/019).

A pool's answer is not trusted to be a sane token count: settlement writes it into the limiter's
shared Redis state (where a value past 2^53 breaks the script for every tenant), Prometheus counters
refuse negative increments, and a pool that sends no usage would make the request free. The rules,
per field, against the request's reservation (`reserved_in`: the input estimate; `granted_out`: the
output the pool may generate, every multiplier included):

- no usage object, or neither field in it: `missing`, the whole reservation is charged;
- not an integer (a string, a float, a bool): `not_integer`, that field's reservation is charged;
- negative: `negative`, likewise;
- output above `granted_out`, or input above `INPUT_BOUND` times the estimate (+ `INPUT_SLACK`):
  `absurd`, likewise. The estimate is at least an eighth of the text bytes (gateway.budget.estimate)
  and no tokenizer emits more than one token per byte, so a truthful pool stays under the bound.

`UsageFaults` counts each fault per pool (`llmgw_ratelimit_usage_missing_total`,
`llmgw_ratelimit_usage_invalid_total{reason}`) and logs it at most once per pool per minute.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

from gateway.observability.metrics import Metrics

INPUT_BOUND = 8
INPUT_SLACK = 1024
LOG_EVERY_S = 60.0

_log = logging.getLogger("llmgw.usage")


def _field(v: Any, reserved: int, bound: int) -> tuple[int, str | None]:
    if type(v) is not int:  # bool is an int subclass, and not a count
        return reserved, "not_integer"
    if v < 0:
        return reserved, "negative"
    if v > bound:
        return reserved, "absurd"
    return v, None


def cached_of(usage: Any, input_tokens: int) -> int:
    """The prompt tokens a pool says it served from its prefix cache (vLLM's
    `prompt_tokens_details.cached_tokens`), bounded by the input charged; 0 when absent or not sane."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if type(cached) is int and 0 <= cached <= input_tokens else 0


def checked(usage: Any, reserved_in: int, granted_out: int) -> tuple[int, int, str | None]:
    """(input tokens, output tokens, the fault or None) to charge for a pool's reported `usage`."""
    if not isinstance(usage, dict):
        return reserved_in, granted_out, "missing"
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if pt is None and ct is None:
        return reserved_in, granted_out, "missing"
    in_bound = INPUT_BOUND * reserved_in + INPUT_SLACK
    if type(pt) is int and type(ct) is int and 0 <= pt <= in_bound and 0 <= ct <= granted_out:
        return pt, ct, None  # a sane report, as nearly every one is: no per-field calls
    inp, bad_in = _field(pt, reserved_in, in_bound)
    out, bad_out = _field(ct, granted_out, granted_out)
    return inp, out, bad_in or bad_out


class UsageFaults:
    """Counts and logs the faults `checked` finds, per pool."""

    __slots__ = ("_metrics", "_logged")

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._logged: dict[str, float] = {}  # pool -> when its last fault was logged

    def count(self, pool: str, fault: str, usage: Any) -> None:
        if fault == "missing":
            self._metrics.usage_missing.labels(pool).inc()
        else:
            self._metrics.usage_invalid.labels(pool, fault).inc()
        now = monotonic()
        if now - self._logged.get(pool, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[pool] = now
            _log.warning(
                "pool %r reported unusable usage (%s): %.200r; the reservation is charged instead "
                "(logged once a minute per pool; see llmgw_ratelimit_usage_*_total)",
                pool,
                fault,
                usage,
            )

    def settle_answer(self, pool: str, parsed: dict[str, Any], reserved_in: int, granted_out: int) -> None:
        """A parsed answer's usage `checked` (a fault counted) and replaced by what will be charged."""
        usage = parsed.get("usage")
        inp, out, fault = checked(usage, reserved_in, granted_out)
        if fault is not None:
            self.count(pool, fault, usage)
        parsed["usage"] = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
