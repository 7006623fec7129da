"""request_text: what the router embeds from an OpenAI chat request."""

from __future__ import annotations

from typing import Any

import pytest

from router.difficulty import request_text


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "hello"}], "hello"),
        (
            [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "answer"},
                {"role": "user", "content": "second"},
            ],
            "second",
        ),
        # The last user turn even when an assistant turn follows it.
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "q"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "describe"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                        {"type": "text", "text": "this picture"},
                    ],
                }
            ],
            "describe\nthis picture",
        ),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], ""),
        ([{"role": "user", "content": None}], ""),
        ([{"role": "user", "content": ""}], ""),
        ([{"role": "system", "content": "only a system prompt"}], ""),
        ([], ""),
        # Malformed parts are skipped, not fatal: routing must never fail a request.
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": 3}, "raw", {"type": "text", "text": "ok"}],
                }
            ],
            "ok",
        ),
    ],
)
def test_request_text(messages: list[dict[str, Any]], expected: str) -> None:
    assert request_text(messages) == expected
