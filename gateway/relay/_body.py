"""Stage 1, read: the request body off the ASGI receive channel, bounded by `max_body_bytes`, and
its JSON nesting bounded by `max_json_depth` (re-encoding a body nested past orjson's 254 levels
fails, and every walker of a body would recurse that deep)."""

from __future__ import annotations

from gateway.edge.exchange import ClientGone, Receive
from gateway.errors import InvalidRequestError, RequestTooLargeError

# Everything but JSON's brackets and string quotes.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def too_deep(raw: bytes, limit: int) -> bool:
    """Whether the JSON text `raw` nests objects/arrays deeper than `limit`.

    Free for most bodies: fewer brackets than the limit cannot nest past it (two C-speed counts).
    Otherwise escaped backslashes and quotes are dropped (left to right, as a JSON reader pairs them),
    then everything but brackets and quotes (C-speed `translate`), and one pass counts the brackets
    outside strings."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    structure = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    depth = 0
    in_string = False
    for c in structure:
        if c == 0x22:  # "
            in_string = not in_string
        elif in_string:
            continue
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


async def read_body(content_length: bytes | None, receive: Receive, limit: int, max_depth: int) -> bytes:
    """The whole body; a declared or actual size over `limit` is refused before more is read, and a
    body nested deeper than `max_depth` once it is read."""
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
            if chunks:
                chunks.append(chunk)
                chunk = b"".join(chunks)
            if too_deep(chunk, max_depth):
                raise InvalidRequestError(
                    f"the request body nests objects/arrays deeper than {max_depth} levels",
                    code="nesting_too_deep",
                )
            return bytes(chunk)
        chunks.append(chunk)
