"""Stage 1, read: the request body off the ASGI receive channel, bounded by `max_body_bytes`."""

from __future__ import annotations

from gateway.edge.exchange import ClientGone, Receive
from gateway.errors import InvalidRequestError, RequestTooLargeError


async def read_body(content_length: bytes | None, receive: Receive, limit: int) -> bytes:
    """The whole body; a declared or actual size over `limit` is refused before more is read."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise InvalidRequestError("invalid Content-Length header") from None
        if declared > limit:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone()
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
        if not msg.get("more_body", False):
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)
