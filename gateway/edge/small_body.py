"""The body of a small JSON endpoint (feedback, the admin API), read only after the caller is
authenticated and never past `limit` bytes: a declared or actual larger body is a 413 before more of it
is read. (The relay's endpoints read theirs in gateway/relay/_body.py, bounded by `max_body_bytes`.)"""

from __future__ import annotations

from starlette.requests import Request

from gateway.errors import InvalidRequestError, RequestTooLargeError

SMALL_BODY_BYTES = 16 * 1024


async def small_body(request: Request, limit: int = SMALL_BODY_BYTES) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_large = int(declared) > limit
        except ValueError:
            raise InvalidRequestError("invalid Content-Length header") from None
        if too_large:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
