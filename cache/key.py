"""What makes two requests "the same" for the caches: pure functions over the parsed request body.

Exact key = hash(scope, route fingerprint, endpoint, the body without the fields that cannot change
the answer). The scope comes first so that no two tenants can ever share a key; the route
fingerprint (the pools and served model names behind the alias) changes when an alias is pointed at
another model, so an answer of the old model is never served for the new one.

Fields left out of the key: `stream` and `stream_options` (a streamed and a non-streamed request get
the same answer: the cache stores the answer, not the wire form), `user` and `metadata` (labels for
the caller's bookkeeping). Everything else (messages, temperature, seed, max_tokens, tools,
response_format, logprobs, n, ...) is part of the key: a parameter we do not know is assumed to
change the output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

# Not part of the answer: how it is delivered, and the caller's own labels.
_IGNORED = frozenset({"stream", "stream_options", "user", "metadata"})
KEY_PREFIX = b"llmgw:cache:v1:"  # under the default key prefix; `prefix_for` gives it under any other


def prefix_for(key_prefix: str) -> bytes:
    """The exact cache's key prefix under the gateway's one key prefix (`limits.key_prefix`)."""
    return f"{key_prefix}:cache:v1:".encode()


def is_deterministic(body: Mapping[str, Any]) -> bool:
    """Temperature 0 or a fixed seed: the caller asked for a reproducible answer, so serving the
    same answer again changes nothing they can observe. (OpenAI's default temperature is 1.)"""
    t = body.get("temperature")
    if isinstance(t, int | float) and not isinstance(t, bool) and t == 0:
        return True
    seed = body.get("seed")
    return isinstance(seed, int) and not isinstance(seed, bool)


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for p in parts:
        # Length-prefixed: no two different part lists hash the same bytes.
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def normalized(body: Mapping[str, Any], drop: frozenset[str] = _IGNORED) -> bytes:
    """The body as canonical bytes: keys sorted, delivery-only fields dropped."""
    return orjson.dumps({k: v for k, v in body.items() if k not in drop}, option=orjson.OPT_SORT_KEYS)


def exact_key(
    scope: str, route: str, endpoint: str, body: Mapping[str, Any], prefix: bytes = KEY_PREFIX
) -> bytes:
    """The Redis / memory key of one request's answer. Raises TypeError on values orjson cannot
    encode (the caller treats that as a bypass; a parsed JSON body never has them)."""
    digest = _digest(scope.encode(), route.encode(), endpoint.encode(), normalized(body))
    return prefix + digest.hex().encode()


def semantic_scope(scope: str, route: str, body: Mapping[str, Any]) -> bytes | None:
    """The semantic cache's partition: tenant scope, route, every parameter and every message except
    the text of the last user turn (that text is what the embedding compares). A different system
    prompt, history or parameter is a different partition, so it can never hit.

    None when the request is not a single text question at the end of a chat (no messages, the last
    message not a user turn, or non-text parts in it): those are exact-cache only.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            return None
    elif not isinstance(content, str):
        return None
    context = {**{k: v for k, v in body.items() if k not in _IGNORED and k != "messages"}}
    context["messages"] = [*messages[:-1], {k: v for k, v in last.items() if k != "content"}]
    return _digest(
        b"semantic", scope.encode(), route.encode(), orjson.dumps(context, option=orjson.OPT_SORT_KEYS)
    )
