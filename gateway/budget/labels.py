"""A request's tags and end user: read from the client, checked before anything is charged (pure).

Tags come from the `x-llmgw-tags` header (comma-separated) and the body's `metadata.tags` (a list of
strings, or one comma-separated string); both may be given, and a tag named twice counts once. The end
user is the chat body's `user` (the Messages dialect maps Anthropic's `metadata.user_id` to it).

Both are client-controlled, so each is bounded and checked here, and every failure is a 400 in the
API's shape that never echoes the value back at length:
- at most `limits.max_tags` tags, each matching `TAG_PATTERN` (<= 64 characters);
- each tag declared (`limits.tags`, or through the admin API): an unknown tag never becomes a new
  budget, key or ledger value;
- each tag allowed for the key (`tags` of the key; unset: any declared tag);
- an end user id of at most `MAX_END_USER` characters, without control characters.
Tags and end users are never label values of a metric; they reach the limiter (escaped scope ids) and
the ledger only.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from typing import Any

from gateway.errors import InvalidRequestError
from ratelimit.model import TAG_PATTERN

MAX_END_USER = 256
MAX_HEADER = 4096  # the header is read whole before it is split: bounded first
_TAG = re.compile(TAG_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _excerpt(value: str) -> str:
    return value if len(value) <= 32 else value[:32] + "..."


def tags_of(
    header: bytes | None,
    body: Mapping[str, Any],
    max_tags: int,
    known: Container[str],
    allowed: Container[str] | None,
) -> tuple[str, ...]:
    """The request's tags, checked; () for a request without any (the common case: two lookups)."""
    metadata = body.get("metadata")
    raw = metadata.get("tags") if isinstance(metadata, dict) else None
    if header is None and raw is None:
        return ()
    names: list[str] = []
    if header is not None:
        if len(header) > MAX_HEADER:
            raise InvalidRequestError(f"x-llmgw-tags is longer than {MAX_HEADER} bytes", code="too_many_tags")
        names += header.decode("latin-1").split(",")
    if raw is not None:
        if isinstance(raw, str):
            names += raw.split(",")
        elif isinstance(raw, list) and all(isinstance(t, str) for t in raw):
            names += raw
        else:
            raise InvalidRequestError(
                "metadata.tags must be a list of strings or a comma-separated string",
                param="metadata.tags",
                code="invalid_tags",
            )
    tags = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    if len(tags) > max_tags:
        raise InvalidRequestError(
            f"{len(tags)} tags, more than the {max_tags} a request may carry", param="metadata.tags",
            code="too_many_tags",
        )  # fmt: skip
    for tag in tags:
        if len(tag) > 64 or not _TAG.match(tag):
            raise InvalidRequestError(
                f"tag '{_excerpt(tag)}' is not a valid tag (letters, digits, '_', '.', ':', '-'; at most 64)",
                param="metadata.tags",
                code="invalid_tag",
            )
        if tag not in known:
            raise InvalidRequestError(
                f"unknown tag '{tag}': tags must be declared (limits.tags or the admin API)",
                param="metadata.tags",
                code="unknown_tag",
            )
        if allowed is not None and tag not in allowed:
            raise InvalidRequestError(
                f"this API key may not use the tag '{tag}'", param="metadata.tags", code="tag_not_allowed"
            )
    return tags


def end_user_of(body: Mapping[str, Any]) -> str | None:
    """The chat body's `user`, checked; None when absent."""
    user = body.get("user")
    if user is None:
        return None
    if not isinstance(user, str):
        raise InvalidRequestError("user must be a string", param="user", code="invalid_user")
    if len(user) > MAX_END_USER or _CONTROL.search(user):
        raise InvalidRequestError(
            f"user must be at most {MAX_END_USER} characters without control characters",
            param="user",
            code="invalid_user",
        )
    return user or None
