"""Opaque values the gateway hands out and accepts back: Anthropic thinking-block `signature`s and
Responses reasoning items' `encrypted_content`.

Both APIs let a client send the model's earlier reasoning back in a later turn, carrying a value only the
issuer can check. A gateway in front of self-hosted pools issues its own: an HMAC-SHA256 over what it
vouches for, under a key every replica shares (`LLMGW_SIGNING_KEY`; unset, a per-process random key, so a
value only verifies on the replica that issued it). A value the gateway did not issue, or whose text was
changed, is refused with a 400: a client cannot slip text past the guardrails as "the model's own
reasoning". Why not encrypt: the reasoning text is the client's to read (it saw it streamed); only
authenticity matters.

- `sign(text)` / `verify(text, signature)`: a detached tag (`gw1.` + 32 base64url characters).
- `seal(text)` / `unseal(value)`: the text itself carried inside the value (`gw1.` + base64url(tag[:24] +
  UTF-8 text)), for `encrypted_content`, whose item may come back without its summary text. `unseal`
  returns None for anything not issued under this key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Final

__all__ = ["MAX_SEALED_BYTES", "Sealer"]

_PREFIX: Final = "gw1."
_TAG: Final = 24  # bytes of the HMAC kept: 192 bits, far past guessing
MAX_SEALED_BYTES: Final = 1 << 20  # a sealed value longer than this is refused before decoding


class Sealer:
    """Signs and checks the gateway's opaque values under one key (bytes, >= 16 of them)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and len(key) < 16:
            raise ValueError("the signing key must be at least 16 bytes")
        self._key = key if key is not None else secrets.token_bytes(32)

    def _tag(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()[:_TAG]

    def sign(self, text: str) -> str:
        return _PREFIX + base64.urlsafe_b64encode(self._tag(text.encode())).decode().rstrip("=")

    def verify(self, text: str, signature: str) -> bool:
        if not signature.startswith(_PREFIX) or len(signature) > 64:
            return False
        return hmac.compare_digest(self.sign(text).encode(), signature.encode())

    def seal(self, text: str) -> str:
        data = text.encode()
        return _PREFIX + base64.urlsafe_b64encode(self._tag(data) + data).decode()

    def unseal(self, value: str) -> str | None:
        if not value.startswith(_PREFIX) or len(value) > MAX_SEALED_BYTES:
            return None
        try:
            raw = base64.urlsafe_b64decode(value[len(_PREFIX) :])
        except (binascii.Error, ValueError):
            return None
        tag, data = raw[:_TAG], raw[_TAG:]
        if len(tag) != _TAG or not hmac.compare_digest(tag, self._tag(data)):
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return None
