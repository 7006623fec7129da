"""Byte-level HTTP/1.1 for fake servers written on asyncio streams (the upstream client tests)."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, head and body (content-length framed); IncompleteReadError when the peer left."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return head + body


def ok(body: bytes, extra: bytes = b"") -> bytes:
    """A 200 with a content-length, and `extra` header lines."""
    return b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
