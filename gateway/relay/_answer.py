"""Stage 7, call: a pool's unary answer read for the request (the unary relay, and the json_schema
policy's first call and retry, read answers the same way).

The answer must be a JSON object (else 502, counted as `malformed`); its usage is recorded on the
request's answer part, checked against its reservation (gateway.budget.usage), and a bad count is
counted per pool.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.budget.usage import UsageFaults, cached_of, checked
from gateway.errors import UpstreamError
from gateway.observability.metrics import Metrics
from gateway.record import Answer, Budget


class AnswerReader:
    __slots__ = ("_malformed", "_faults")

    def __init__(self, metrics: Metrics) -> None:
        self._malformed = metrics.upstream_errors
        self._faults = UsageFaults(metrics)

    def read(self, answer: Answer, budget: Budget, pool: str, data: bytes) -> dict[str, Any]:
        """The parsed answer; its usage is now `answer.usage_in`/`usage_out`, checked against `budget`'s
        reservation (raises the 502 if malformed)."""
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            self._malformed.labels(pool, "malformed").inc()
            raise UpstreamError(f"pool '{pool}' returned a malformed response")
        usage = parsed.get("usage")
        answer.usage_in, answer.usage_out, fault = checked(usage, budget.reserved_in, budget.granted_out)
        answer.fault, answer.reported = fault, True
        answer.usage_cached = cached_of(usage, answer.usage_in)
        if fault is not None:
            self._faults.count(pool, fault, usage)
        return parsed
