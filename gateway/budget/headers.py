"""OpenAI's `x-ratelimit-*` response headers from a limiter decision (the tightest enforced request
rule and token rule), with resets in Go's duration format as OpenAI prints them."""

from __future__ import annotations

from ratelimit.model import Dimension, RuleState

__all__ = ["go_duration", "rate_limit_headers"]

_TOKEN_DIMS = frozenset((Dimension.TOKENS, Dimension.INPUT_TOKENS, Dimension.OUTPUT_TOKENS))


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
    for s in states:
        rule = s.rule
        if rule.shadow:
            continue
        if rule.dimension == Dimension.REQUESTS:
            if req is None or s.remaining < req.remaining:
                req = s
        elif rule.dimension in _TOKEN_DIMS and (tok is None or s.remaining < tok.remaining):
            tok = s
    out = _headers(b"requests", req) if req is not None else []
    if tok is not None:
        out += _headers(b"tokens", tok)
    return out
