"""A pool's reported usage is checked before it is charged (gateway.budget.usage, docs/design/019)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.budget.usage import INPUT_BOUND, INPUT_SLACK, UsageFaults, checked
from gateway.config import Model, Policy, Pool, Route
from gateway.observability.metrics import Metrics

RESERVED_IN, GRANTED_OUT = 120, 400


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 100, "completion_tokens": 50}, (100, 50, None)),
        ({"prompt_tokens": 0, "completion_tokens": 0}, (0, 0, None)),
        ({"prompt_tokens": 100, "completion_tokens": GRANTED_OUT}, (100, GRANTED_OUT, None)),
        # a truthful pool may count more prompt tokens than estimated: up to the bound, it is believed
        ({"prompt_tokens": 300, "completion_tokens": 1}, (300, 1, None)),
        (None, (RESERVED_IN, GRANTED_OUT, "missing")),
        ("12", (RESERVED_IN, GRANTED_OUT, "missing")),
        ({}, (RESERVED_IN, GRANTED_OUT, "missing")),
        ({"total_tokens": 9}, (RESERVED_IN, GRANTED_OUT, "missing")),
        ({"prompt_tokens": -5, "completion_tokens": 3}, (RESERVED_IN, 3, "negative")),
        ({"prompt_tokens": 5, "completion_tokens": -3}, (5, GRANTED_OUT, "negative")),
        ({"prompt_tokens": "5", "completion_tokens": 3}, (RESERVED_IN, 3, "not_integer")),
        ({"prompt_tokens": 5, "completion_tokens": 3.0}, (5, GRANTED_OUT, "not_integer")),
        ({"prompt_tokens": True, "completion_tokens": 3}, (RESERVED_IN, 3, "not_integer")),
        ({"prompt_tokens": 5}, (5, GRANTED_OUT, "not_integer")),
        ({"prompt_tokens": 5, "completion_tokens": 10**18}, (5, GRANTED_OUT, "absurd")),
        ({"prompt_tokens": 10**18, "completion_tokens": 3}, (RESERVED_IN, 3, "absurd")),
        ({"prompt_tokens": 5, "completion_tokens": GRANTED_OUT + 1}, (5, GRANTED_OUT, "absurd")),
        (
            {"prompt_tokens": INPUT_BOUND * RESERVED_IN + INPUT_SLACK + 1, "completion_tokens": 3},
            (RESERVED_IN, 3, "absurd"),
        ),
    ],
)
def test_usage_is_charged_as_reported_or_as_reserved(
    usage: Any, expected: tuple[int, int, str | None]
) -> None:
    assert checked(usage, RESERVED_IN, GRANTED_OUT) == expected


def test_what_is_charged_is_always_a_sane_count() -> None:
    """Whatever a pool sends, the result fits the limiter's scripts (integers, 0..bound)."""
    weird: list[Any] = [None, -1, 2**63, 10**18, "x", 1.5, True, [], {}, float("nan")]
    for pt in weird:
        for ct in weird:
            inp, out, _ = checked({"prompt_tokens": pt, "completion_tokens": ct}, RESERVED_IN, GRANTED_OUT)
            assert type(inp) is int and type(out) is int
            assert 0 <= inp <= INPUT_BOUND * RESERVED_IN + INPUT_SLACK
            assert 0 <= out <= GRANTED_OUT


def test_faults_are_counted_per_pool_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    policy = Policy(
        pools=[Pool(name="a", model="m", endpoints={"static": ["http://127.0.0.1:9"]})],
        models=[Model(name="m", route=Route(pool="a"))],
    )
    metrics = Metrics(policy)
    faults = UsageFaults(metrics)
    with caplog.at_level(logging.WARNING, logger="llmgw.usage"):
        faults.count("a", "missing", None)
        faults.count("a", "negative", {"prompt_tokens": -1})
        faults.count("b", "absurd", {"completion_tokens": 10**18})
    assert metrics.usage_missing.labels("a").value == 1
    assert metrics.usage_invalid.labels("a", "negative").value == 1
    assert metrics.usage_invalid.labels("b", "absurd").value == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # a's second fault within the minute is counted, not logged
    assert "'a'" in lines[0] and "missing" in lines[0]
    assert "'b'" in lines[1] and "absurd" in lines[1]


@pytest.mark.parametrize(
    ("usage", "charged", "missing"),
    [
        ({"prompt_tokens": 7, "completion_tokens": 3}, (7, 3), 0),
        (None, (RESERVED_IN, GRANTED_OUT), 1),  # no usage: charged as reserved (the explorer used 0)
        ({"prompt_tokens": True, "completion_tokens": 3}, (RESERVED_IN, 3), 0),
    ],
)
def test_an_answer_is_settled_on_checked_usage(usage: Any, charged: tuple[int, int], missing: int) -> None:
    policy = Policy(
        pools=[Pool(name="a", model="m", endpoints={"static": ["http://127.0.0.1:9"]})],
        models=[Model(name="m", route=Route(pool="a"))],
    )
    metrics = Metrics(policy)
    parsed: dict[str, Any] = {"choices": []} if usage is None else {"choices": [], "usage": usage}
    UsageFaults(metrics).settle_answer("a", parsed, RESERVED_IN, GRANTED_OUT)
    inp, out = charged
    assert parsed["usage"] == {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
    assert metrics.usage_missing.labels("a").value == missing
