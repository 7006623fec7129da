"""OpenAI's `x-ratelimit-*` response headers from a limiter decision (the tightest enforced request
rule and token rule), with resets in Go's duration format as OpenAI prints them; and the same three for
the dollar budget that binds (`-usd`, amounts in USD), with `x-ratelimit-budget-usd` naming it
(`org.usd_per_month`; a reset of `0s` is a total that never resets)."""

from __future__ import annotations

from ratelimit.model import MICRO_USD, USD_DIMENSIONS, Dimension, RuleState

__all__ = ["go_duration", "rate_limit_headers"]

_TOKEN_DIMS = frozenset((Dimension.TOKENS, Dimension.INPUT_TOKENS, Dimension.OUTPUT_TOKENS))
_BUDGET = {
    Dimension.USD_DAY: "usd_per_day",
    Dimension.USD_MONTH: "usd_per_month",
    Dimension.USD_TOTAL: "usd_total",
}


def go_duration(seconds: float) -> str:
    """OpenAI's reset format: Go-style durations (`12ms`, `1s`, `6m0s`, `2m59.56s`), to 10 ms from 1 s.

    Integer arithmetic on hundredths instead of float formatting (`:g`): this runs twice per request."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    cs = round(seconds * 100)
    if cs < 6000:
        return _seconds(cs)
    minutes, cs = divmod(cs, 6000)
    if minutes < 60:
        return f"{minutes}m{_seconds(cs)}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{_seconds(cs)}"


def _seconds(cs: int) -> str:
    """Hundredths of a second as Go prints seconds: `6s`, `6.5s`, `6.05s`."""
    whole, frac = divmod(cs, 100)
    if frac == 0:
        return f"{whole}s"
    if frac % 10 == 0:
        return f"{whole}.{frac // 10}s"
    return f"{whole}.{frac:02d}s"


def _headers(suffix: bytes, s: RuleState) -> list[tuple[bytes, bytes]]:
    return [
        (b"x-ratelimit-limit-" + suffix, str(s.rule.limit).encode()),
        (b"x-ratelimit-remaining-" + suffix, str(max(0, s.remaining)).encode()),
        (b"x-ratelimit-reset-" + suffix, go_duration(s.reset_s).encode()),
    ]


def rate_limit_headers(states: tuple[RuleState, ...]) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-*` headers for the tightest enforced request rule and token rule."""
    req: RuleState | None = None
    tok: RuleState | None = None
    usd: RuleState | None = None
    for s in states:
        rule = s.rule
        if rule.shadow:
            continue
        if rule.dimension == Dimension.REQUESTS:
            if req is None or s.remaining < req.remaining:
                req = s
        elif rule.dimension in _TOKEN_DIMS:
            if tok is None or s.remaining < tok.remaining:
                tok = s
        elif rule.dimension in USD_DIMENSIONS and (usd is None or s.remaining < usd.remaining):
            usd = s
    out = _headers(b"requests", req) if req is not None else []
    if tok is not None:
        out += _headers(b"tokens", tok)
    if usd is not None:
        out += _usd_headers(usd)
    return out


def _usd_headers(s: RuleState) -> list[tuple[bytes, bytes]]:
    rule = s.rule
    return [
        (b"x-ratelimit-limit-usd", dollars(rule.limit).encode()),
        (b"x-ratelimit-remaining-usd", dollars(max(0, s.remaining)).encode()),
        (b"x-ratelimit-reset-usd", go_duration(s.reset_s).encode()),
        (b"x-ratelimit-budget-usd", f"{rule.level.value}.{_BUDGET[rule.dimension]}".encode()),
    ]


def dollars(micro: int) -> str:
    """Micro-dollars as a decimal USD amount, exactly (`1.5`, `0.000005`)."""
    whole, frac = divmod(micro, MICRO_USD)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".") if frac else str(whole)
