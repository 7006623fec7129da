"""OpenAI's `x-ratelimit-*` headers: the reset duration format and the choice of the tightest rule."""

from __future__ import annotations

import pytest

from gateway.budget.headers import go_duration, rate_limit_headers
from ratelimit.model import Dimension, Level, Rule, RuleState


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0ms"),
        (-0.2, "0ms"),
        (0.0124, "12ms"),
        (0.9994, "999ms"),
        (1.0, "1s"),
        (6.5, "6.5s"),
        (6.05, "6.05s"),
        (59.56, "59.56s"),
        (59.999, "1m0s"),  # rounds to a whole minute: never "60s"
        (60.0, "1m0s"),
        (179.56, "2m59.56s"),
        (360.0, "6m0s"),
        (3600.0, "1h0m0s"),
        (86_399.5, "23h59m59.5s"),
    ],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_go_duration_parses_back_to_within_10ms() -> None:
    for ms in range(0, 4_000_000, 997):
        text = go_duration(ms / 1000)
        total = 0.0
        rest = text
        for unit, scale in (("h", 3600.0), ("m", 60.0)):
            if unit in rest and not rest.endswith("ms"):
                head, rest = rest.split(unit, 1)
                total += int(head) * scale
        total += float(rest[:-2]) / 1000 if rest.endswith("ms") else float(rest[:-1])
        assert abs(total - ms / 1000) <= 0.005 + 1e-9, (ms, text)


def _rule(dimension: Dimension, limit: int, *, shadow: bool = False, level: Level = Level.KEY) -> Rule:
    return Rule(level=level, scope="k", dimension=dimension, limit=limit, shadow=shadow)


def test_headers_name_the_tightest_enforced_rule_per_kind() -> None:
    states = (
        RuleState(_rule(Dimension.REQUESTS, 100), 40, 12.0),
        RuleState(_rule(Dimension.REQUESTS, 10, level=Level.ORG), 3, 0.5),
        RuleState(_rule(Dimension.REQUESTS, 5, shadow=True), 0, 1.0),  # shadow: never in headers
        RuleState(_rule(Dimension.TOKENS, 10_000), 9_000, 59.56),
        RuleState(_rule(Dimension.OUTPUT_TOKENS, 2_000), 1_500, 30.0),
        RuleState(_rule(Dimension.CONCURRENT, 4), 0, 0.0),  # neither kind
    )
    assert dict(rate_limit_headers(states)) == {
        b"x-ratelimit-limit-requests": b"10",
        b"x-ratelimit-remaining-requests": b"3",
        b"x-ratelimit-reset-requests": b"500ms",
        b"x-ratelimit-limit-tokens": b"2000",
        b"x-ratelimit-remaining-tokens": b"1500",
        b"x-ratelimit-reset-tokens": b"30s",
    }


def test_headers_clamp_remaining_and_omit_absent_kinds() -> None:
    states = (RuleState(_rule(Dimension.TOKENS, 100), -5, 2.0),)
    assert rate_limit_headers(states) == [
        (b"x-ratelimit-limit-tokens", b"100"),
        (b"x-ratelimit-remaining-tokens", b"0"),
        (b"x-ratelimit-reset-tokens", b"2s"),
    ]
    assert rate_limit_headers(()) == []
