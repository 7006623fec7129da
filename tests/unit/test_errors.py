from __future__ import annotations

import orjson
import pytest

from gateway import errors as E


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code", "retryable"),
    [
        (E.InvalidRequestError, 400, "invalid_request_error", None, False),
        (E.InvalidJSONError, 400, "invalid_request_error", "invalid_json", False),
        (E.AuthenticationError, 401, "authentication_error", "invalid_api_key", False),
        (E.PermissionDeniedError, 403, "permission_error", "permission_denied", False),
        (E.NotFoundError, 404, "invalid_request_error", "not_found", False),
        (E.ModelNotFoundError, 404, "invalid_request_error", "model_not_found", False),
        (E.RequestTooLargeError, 413, "invalid_request_error", "request_too_large", False),
        (E.UnprocessableEntityError, 422, "invalid_request_error", "unprocessable_entity", False),
        (E.RateLimitError, 429, "rate_limit_error", "rate_limit_exceeded", True),
        (E.InternalError, 500, "api_error", "internal_error", False),
        (E.UpstreamError, 502, "api_error", "upstream_error", True),
        (E.UpstreamUnavailableError, 503, "api_error", "upstream_unavailable", True),
        (E.UpstreamTimeoutError, 504, "api_error", "upstream_timeout", True),
    ],
)
def test_each_error_class_renders_the_openai_shape(
    cls: type[E.GatewayError], status: int, type_: str, code: str | None, retryable: bool
) -> None:
    err = cls("something happened", param="p")
    assert err.status == status
    assert orjson.loads(err.body()) == {
        "error": {"message": "something happened", "type": type_, "param": "p", "code": code}
    }
    headers = err.response_headers()
    assert ("retry-after" in headers) is retryable
    assert (headers.get("x-should-retry") == "false") is (not retryable)


@pytest.mark.parametrize(
    ("status", "body", "want_status", "want_code", "message_has"),
    [
        (
            400,
            b'{"error":{"message":"too long","type":"BadRequestError","param":null,"code":400}}',
            400,
            None,
            "too long",
        ),
        (
            400,
            b'{"error":{"message":"bad","type":"x","param":"temperature","code":"invalid_value"}}',
            400,
            "invalid_value",
            "bad",
        ),
        (401, b'{"error":"Unauthorized"}', 502, "upstream_error", "credentials"),
        (404, b'{"detail":"Not Found"}', 502, "upstream_error", "does not serve"),
        (422, b'{"detail":"Not Found"}', 422, "unprocessable_entity", "Not Found"),
        (429, b"", 429, "rate_limit_exceeded", "rejected"),
        (500, b"<html>", 502, "upstream_error", "HTTP 500"),
        (501, b'{"error":{"message":"nope","code":501}}', 502, "upstream_error", "nope"),
        (503, b"", 503, "upstream_unavailable", "unavailable"),
        (504, b"", 504, "upstream_timeout", "timed out"),
        (409, b"[]", 400, None, "HTTP 409"),
    ],
)
def test_upstream_statuses_are_normalized(
    status: int, body: bytes, want_status: int, want_code: str | None, message_has: str
) -> None:
    err = E.from_upstream(status, body, "small")
    assert err.status == want_status
    assert err.code == want_code
    assert message_has in err.message


def test_upstream_429_keeps_retry_after() -> None:
    assert E.from_upstream(429, b"", "p", retry_after="12").response_headers()["retry-after"] == "12"
