"""SpendRow's spool encoding: a round trip keeps every field, and anything malformed is a ValueError."""

from __future__ import annotations

import orjson
import pytest

from gateway.ledger.model import FORMAT, SpendRow

ROW = SpendRow(
    request_id="req-1",
    at=1_796_670_630.25,
    org="acme",
    app="web",
    key_id="k1",
    tags=("prod", "eu"),
    end_user="u-42",
    alias="auto",
    pool="small",
    adapter="support-v2",
    tier="small",
    tokens_in=120,
    tokens_out=34,
    tokens_cached=64,
    cost_micro_usd=1_520,
    status=200,
    cache_hit=False,
)


def _fields() -> list[object]:
    value = orjson.loads(ROW.encode())
    assert isinstance(value, list)
    return value


def _with(index: int, value: object) -> bytes:
    fields = _fields()
    fields[index] = value
    return orjson.dumps(fields)


def test_round_trip_keeps_every_field() -> None:
    assert SpendRow.decode(ROW.encode()) == ROW
    bare = SpendRow("r", 1.0, "", "", "", (), None, "", "", None, None, 0, 0, 0, 0, 499, True)
    assert SpendRow.decode(bare.encode()) == bare


def test_encoding_is_a_compact_array_led_by_its_format() -> None:
    data = ROW.encode()
    assert b" " not in data and b"\n" not in data
    assert _fields()[0] == FORMAT
    assert b"request_id" not in data  # no field names in the spool


def test_an_integral_time_decodes_as_a_float() -> None:
    row = SpendRow.decode(_with(2, 1_796_670_630))
    assert row.at == 1_796_670_630.0 and isinstance(row.at, float)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unexpected|Input is a zero-length"),
        (b"not json", "unexpected|expected"),
        (b'{"request_id": "r"}', "JSON array of 18"),
        (b"[1, 2, 3]", "JSON array of 18"),
        (_with(0, 2), "format 2"),
        (_with(0, True), "format True"),
        (_with(1, ""), "request_id is not a non-empty string"),
        (_with(1, 5), "request_id"),
        (_with(2, "yesterday"), "at is not a unix time"),
        (_with(2, -1), "at is not a unix time"),
        (_with(2, True), "at is not a unix time"),
        (_with(3, None), "org is not a string"),
        (_with(6, "prod"), "tags is not a list of strings"),
        (_with(6, ["prod", 1]), "tags is not a list of strings"),
        (_with(6, ["a\x00b"]), "tags contains a NUL"),
        (_with(7, 3), "end_user is neither a string nor null"),
        (_with(8, "a\x00"), "alias contains a NUL"),
        (_with(12, -1), "tokens_in is not a non-negative integer"),
        (_with(13, 1.5), "tokens_out is not a non-negative integer"),
        (_with(14, False), "tokens_cached is not a non-negative integer"),
        (_with(15, 2**63), "cost_micro_usd is not a non-negative integer"),
        (_with(15, "1520"), "cost_micro_usd"),
        (_with(16, 42), "status is not an HTTP status"),
        (_with(16, 200.0), "status is not an HTTP status"),
        (_with(17, 0), "cache_hit is not a boolean"),
    ],
)
def test_malformed_input_is_a_value_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpendRow.decode(data)
