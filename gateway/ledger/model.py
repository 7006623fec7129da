"""One row of the spend ledger: what a finished request used and cost, and who it was for.

In the spool a row is a compact JSON array, the format version first, then the fields in declaration
order:

    [1, "req-1", 1796670630.25, "acme", "web", "k1", ["prod"], null, "small", "small", null, null,
     12, 34, 0, 1520, 200, false]

An array rather than an object: a spool of 2 million rows holds no field names (about 40 % smaller).
A row that does not decode (another version, a wrong type, a negative count) is a `ValueError`; the
drainer counts it as dropped instead of retrying it forever.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

__all__ = ["FORMAT", "SpendRow"]

FORMAT = 1  # the first element of an encoded row; a new layout gets a new number


class SpendRow(NamedTuple):
    """A named tuple: one is built per finished request on the event loop, and a tuple costs a tenth of a
    frozen dataclass of 17 fields (`object.__setattr__` per field)."""

    request_id: str  # the gateway's x-request-id (unique per request): the ledger's primary key
    at: float  # unix seconds, when the request finished
    org: str
    app: str
    key_id: str
    tags: tuple[str, ...]
    end_user: str | None
    alias: str  # the model name the client asked for
    pool: str
    adapter: str | None
    tier: str | None  # the key's tier (standard, premium, ...)
    tokens_in: int
    tokens_out: int
    tokens_cached: int
    cost_micro_usd: int  # exact integer micro-dollars (1 USD = 1_000_000)
    status: int  # HTTP status
    cache_hit: bool

    def encode(self) -> bytes:
        return orjson.dumps((FORMAT, *self))

    @classmethod
    def decode(cls, data: bytes) -> SpendRow:
        """The row `encode` wrote; anything else is a ValueError naming what is wrong."""
        value = orjson.loads(data)  # orjson.JSONDecodeError is a ValueError
        if not isinstance(value, list) or len(value) != _LENGTH:
            raise ValueError(f"a spend row is a JSON array of {_LENGTH} elements")
        if value[0] != FORMAT or type(value[0]) is not int:
            raise ValueError(f"spend row format {value[0]!r} (this version reads {FORMAT})")
        (
            _,
            request_id,
            at,
            org,
            app,
            key_id,
            tags,
            end_user,
            alias,
            pool,
            adapter,
            tier,
            tokens_in,
            tokens_out,
            tokens_cached,
            cost,
            status,
            cache_hit,
        ) = value
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ValueError("spend row: tags is not a list of strings")
        if type(cache_hit) is not bool:
            raise ValueError("spend row: cache_hit is not a boolean")
        # bool is an int in Python: excluded from the numbers explicitly.
        if type(at) not in (int, float) or not 0 <= at < 1e11:
            raise ValueError(f"spend row: at is not a unix time in seconds ({at!r})")
        return cls(
            request_id=_text("request_id", request_id),
            at=float(at),
            org=_text("org", org, empty=True),
            app=_text("app", app, empty=True),
            key_id=_text("key_id", key_id, empty=True),
            tags=tuple(_text("tags", t, empty=True) for t in tags),
            end_user=_optional("end_user", end_user),
            alias=_text("alias", alias, empty=True),
            pool=_text("pool", pool, empty=True),
            adapter=_optional("adapter", adapter),
            tier=_optional("tier", tier),
            tokens_in=_count("tokens_in", tokens_in),
            tokens_out=_count("tokens_out", tokens_out),
            tokens_cached=_count("tokens_cached", tokens_cached),
            cost_micro_usd=_count("cost_micro_usd", cost),
            status=_status(status),
            cache_hit=cache_hit,
        )


_LENGTH = 18
_BIGINT = 2**63 - 1  # the column type's bound: a larger count would fail the whole batch in PostgreSQL


def _text(name: str, value: Any, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise ValueError(f"spend row: {name} is not a{'' if empty else ' non-empty'} string")
    if "\x00" in value:
        # PostgreSQL's text cannot hold NUL: such a row would fail its whole batch, again and again.
        raise ValueError(f"spend row: {name} contains a NUL character")
    return value


def _optional(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"spend row: {name} is neither a string nor null")
    return _text(name, value, empty=True)


def _count(name: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value <= _BIGINT:
        raise ValueError(f"spend row: {name} is not a non-negative integer ({value!r})")
    return value


def _status(value: Any) -> int:
    if type(value) is not int or not 100 <= value <= 599:
        raise ValueError(f"spend row: status is not an HTTP status ({value!r})")
    return value
