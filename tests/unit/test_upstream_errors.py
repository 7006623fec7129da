"""What a client is told about a pool's refusal or failure: the pool's name, the status and a reason:
for a refusal (4xx) the pool's own message with internal names replaced, for a failure the gateway's
words only; the pool's whole text goes to the log with the request id."""

from __future__ import annotations

import errno
import logging
from email.utils import formatdate

import orjson
import pytest

from gateway.errors import BadResponse, ConnectFailed, Disconnected, TransportError, TransportTimeout
from gateway.sse import EventTooLarge
from gateway.upstream.failures import (
    REASON_MAX,
    RETRY_AFTER_MAX_S,
    clamp_retry_after,
    classify,
    from_upstream,
    pool_reason,
)

SECRET = (
    "failed at http://vllm-0.internal:8000/v1 with token sk-internal-0123456789 on host gpu-7.corp.example, "
    "hf_SECRETtoken0123456789abcdef"
)


def vllm(status: int, message: str = SECRET, code: object = None, param: object = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "X", "param": param, "code": code or status}})


@pytest.mark.parametrize(
    ("status", "body", "want_status", "want_code", "message"),
    [
        (400, vllm(400), 400, None, "pool 'small' rejected the request (HTTP 400): failed at <url>"),
        (400, vllm(400, "tiny is not a multimodal model"), 400, None, "(HTTP 400): tiny is not a multimodal"),
        (400, vllm(400, code="invalid_value", param="temperature"), 400, "invalid_value", "rejected"),
        (
            400,
            vllm(400, "This model's maximum context length is 2048 tokens. " + SECRET),
            400,
            "context_length_exceeded",
            "the request exceeds the model's context length (pool 'small', HTTP 400)",
        ),
        (401, b'{"error":"Unauthorized"}', 502, "upstream_error", "credentials"),
        (404, vllm(404), 502, "upstream_error", "does not serve"),
        (413, vllm(413), 413, "request_too_large", "HTTP 413"),
        (422, b'{"detail":"' + SECRET.encode() + b'"}', 422, "unprocessable_entity", "HTTP 422"),
        (429, vllm(429), 429, "rate_limit_exceeded", "rate limiting"),
        (500, vllm(500), 502, "upstream_error", "pool 'small' failed with HTTP 500"),
        (500, b"<html>" + SECRET.encode(), 502, "upstream_error", "HTTP 500"),
        (501, vllm(501), 502, "upstream_error", "HTTP 501"),
        (503, SECRET.encode(), 503, "upstream_unavailable", "unavailable (HTTP 503)"),
        (504, vllm(504), 504, "upstream_timeout", "timed out (HTTP 504)"),
        (409, b"[]", 400, None, "HTTP 409"),
    ],
)
def test_a_pool_refusal_tells_name_status_and_a_cleaned_reason(
    status: int,
    body: bytes,
    want_status: int,
    want_code: str | None,
    message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "llmgw.upstream")
    err = from_upstream(status, body, "small", rid="req-1")
    assert err.status == want_status
    assert err.code == want_code
    assert message in err.message
    for leak in ("vllm-0", "sk-internal", "gpu-7", "http://", "8000", "hf_SECRET"):
        assert leak not in err.body().decode()
    if SECRET in body.decode(errors="replace") and status not in (401,):
        assert any("req-1" in r.getMessage() and "sk-internal" in r.getMessage() for r in caplog.records)


def test_code_and_param_pass_only_when_they_look_like_identifiers() -> None:
    err = from_upstream(400, vllm(400, code="http://x y", param="a b c"), "p")
    assert err.code is None and err.param is None


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("7", "7"),
        ("99999999", str(RETRY_AFTER_MAX_S)),
        (" 60 ", "60"),
        ("-5", None),
        ("soon", None),
        ("1e9", None),
        (None, None),
    ],
)
def test_retry_after_is_clamped(value: str | None, want: str | None) -> None:
    assert clamp_retry_after(value) == want


def test_an_http_date_retry_after_becomes_clamped_seconds() -> None:
    now = 1_800_000_000.0
    assert clamp_retry_after(formatdate(now + 30, usegmt=True), now) == "30"
    assert clamp_retry_after(formatdate(now + 86400, usegmt=True), now) == str(RETRY_AFTER_MAX_S)
    assert clamp_retry_after(formatdate(now - 100, usegmt=True), now) == "0"


def test_a_pools_429_and_503_pass_a_clamped_retry_after() -> None:
    assert from_upstream(429, b"", "p", retry_after="12").response_headers()["retry-after"] == "12"
    assert from_upstream(429, b"", "p", retry_after="99999999").response_headers()["retry-after"] == "60"
    assert from_upstream(503, b"", "p", retry_after="99999999").response_headers()["retry-after"] == "60"
    assert from_upstream(503, b"", "p", retry_after="junk").response_headers()["retry-after"] == "1"


@pytest.mark.parametrize(
    ("exc", "kind", "message"),
    [
        (
            ConnectFailed(
                "cannot connect to 10.1.2.3:19101: "
                + ConnectionRefusedError(errno.ECONNREFUSED, "refused").strerror
            ),
            "connect",
            "unreachable",
        ),
        (Disconnected("gone"), "disconnect", "closed the connection"),
        (
            BadResponse("content-encoding 'gzip' from 10.1.2.3", "a compressed response"),
            "client_error",
            "compressed",
        ),
        (EventTooLarge(2 << 20, 1 << 20), "client_error", "larger than 1024 KiB"),
        (TransportTimeout("the exchange exceeded its total timeout"), "timeout", "in time"),
    ],
)
def test_transport_failures_hide_addresses_and_log_them(
    exc: TransportError, kind: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    err, got = classify(exc, "small", "req-9")
    assert got == kind and message in err.message
    assert "10.1.2.3" not in err.message and "19101" not in err.message
    # The transport's error is one of the gateway's: rendered as it is, it names no address either.
    assert "10.1.2.3" not in exc.body().decode() and "19101" not in exc.body().decode()
    assert any("req-9" in r.getMessage() for r in caplog.records)
    if isinstance(exc, ConnectFailed):
        assert any("10.1.2.3:19101" in r.getMessage() for r in caplog.records)


LOGPROBS = (
    "Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)"  # noqa: E501
)


@pytest.mark.parametrize(
    ("said", "want"),
    [
        (LOGPROBS, LOGPROBS),
        ("Loading lora c failed: No adapter found for /models/adapters/c", "No adapter found for <path>"),
        (
            "connect 10.0.3.4:8000 and [fe80::1]:80 and 2001:db8:0:0:1:0:0:1",
            "connect <address> and <address> and <address>",
        ),
        ("vllm-0.vllm.ns.svc.cluster.local refused, gpu7:8000 down", "<host> refused, <host> down"),
        ("{'loc': 'body.messages', 'msg': 'Field required'} in 0.32.0", "'body.messages'"),
        ("key sk-proj-0123456789abcdef0123456789 is bad", "[SECRET]"),
        ("line\x00\x1bone\n\ntwo", "line one two"),
    ],
)
def test_a_pool_reason_keeps_the_words_and_drops_internal_names(said: str, want: str) -> None:
    reason = pool_reason(said)
    assert want in reason
    assert len(reason) <= REASON_MAX


def test_a_pool_reason_is_bounded_in_length_and_time() -> None:
    assert len(pool_reason("x" * 100_000)) == REASON_MAX
    for hostile in (":a" * 5000, "a." * 5000, "a-" * 5000 + ":", "/a" * 5000, "1.1." * 2000):
        assert len(pool_reason(hostile)) <= REASON_MAX  # linear patterns: returns at once


def test_a_pool_failure_never_relays_its_text() -> None:
    for status in (500, 502, 503, 504):
        assert (
            "multimodal"
            not in from_upstream(status, vllm(status, "tiny is not a multimodal model"), "p").message
        )
