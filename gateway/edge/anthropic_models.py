"""`GET /v1/models` and `/v1/models/{id}` in Anthropic's shape, for a caller that speaks Anthropic.

The same path serves both APIs: a request with an `anthropic-version` header or an `x-api-key` (what
the Anthropic SDKs and Claude Code send) gets Anthropic's model objects and list envelope (`data`,
`first_id`, `last_id`, `has_more`; `limit` 1-1000, `after_id`, `before_id`), and its errors in
Anthropic's error shape; any other caller gets OpenAI's. The listed models are the same either way:
the aliases the caller's key may use.

A model object states what the gateway does with the alias's requests, not what the model behind it
could do: `capabilities` says what the Messages dialect maps (thinking, effort, structured outputs,
images passed to the pool) and what it cannot run in front of a self-hosted pool (batches, citations,
PDFs, server tools, context management: all `supported: false`). `max_tokens` is the alias's output
cap; `max_input_tokens` its `context_tokens` (null when the policy does not say). `created_at` is the
gateway's start (a release date is not known for a self-hosted model; Anthropic allows an epoch value).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.config import Policy
from gateway.config_lora import ADAPTER_SEPARATOR
from gateway.dialects._messages_stream import error_body
from gateway.edge.openapi import ModelCard
from gateway.errors import GatewayError, InvalidRequestError, ModelNotFoundError

__all__ = ["anthropic_model", "anthropic_models", "speaks_anthropic"]

MAX_LIMIT: Final = 1000
DEFAULT_LIMIT: Final = 20


def _supported(flag: bool) -> dict[str, bool]:
    return {"supported": flag}


_NO = _supported(False)
_YES = _supported(True)
CAPABILITIES: Final[Mapping[str, Any]] = {
    "batch": _NO,
    "citations": _NO,
    "code_execution": _NO,
    "context_management": {
        "supported": False,
        "clear_thinking_20251015": _NO,
        "clear_tool_uses_20250919": _NO,
        "compact_20260112": _NO,
    },
    # output_config.effort -> the pool's reasoning_effort (max and xhigh as high)
    "effort": {"supported": True, "low": _YES, "medium": _YES, "high": _YES, "max": _YES, "xhigh": _YES},
    "image_input": _YES,  # passed to the pool; a text-only pool's refusal reaches the caller
    "pdf_input": _NO,
    "server_tools": {"supported": False, "code_execution": _NO, "web_search": _NO},
    "structured_outputs": _YES,  # output_config.format -> response_format json_schema
    "thinking": {
        "supported": True,
        "types": {"adaptive": _YES, "enabled": _YES, "disabled": _YES, "between_tools": _NO},
    },
}

Cards = Callable[[Request], Awaitable[list[ModelCard]]]


def speaks_anthropic(headers: Mapping[str, str]) -> bool:
    return "anthropic-version" in headers or "x-api-key" in headers


def _error(err: GatewayError) -> JSONResponse:
    return JSONResponse(
        error_body(err.status, err.payload()["error"]), status_code=err.status, headers=err.response_headers()
    )


def _object(card: ModelCard, policy: Policy) -> dict[str, Any]:
    alias = card.parent or card.id
    model = next((m for m in policy.models if m.name == alias), None)
    display = model.display_name if model is not None and model.display_name else alias
    if card.parent is not None:
        display = f"{display} ({card.id.split(ADAPTER_SEPARATOR, 1)[1]} adapter)"
    return {
        "type": "model",
        "id": card.id,
        "display_name": display,
        "created_at": datetime.fromtimestamp(card.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lifecycle": "active",
        "deprecated_at": None,
        "retires_at": None,
        "line": None,
        "max_input_tokens": model.context_tokens if model is not None else None,
        "max_tokens": model.max_tokens.cap if model is not None else None,
        "capabilities": CAPABILITIES,
    }


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise InvalidRequestError(f"limit: must be an integer from 1 to {MAX_LIMIT}", param="limit")
    return int(value)


def _page(ids: list[str], after: str | None, before: str | None, limit: int) -> tuple[int, int, bool]:
    """(start, end, has_more) of the page of `ids` after `after` / before `before` (Anthropic's cursors)."""
    if after is not None and before is not None:
        raise InvalidRequestError("after_id and before_id cannot both be given", param="before_id")
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
        end = min(start + limit, len(ids))
        return start, end, end < len(ids)
    if before is not None:
        end = ids.index(before) if before in ids else 0
        start = max(0, end - limit)
        return start, end, start > 0
    return 0, min(limit, len(ids)), limit < len(ids)


async def anthropic_models(request: Request, policy: Policy, cards: Cards) -> JSONResponse:
    try:
        q = request.query_params
        limit = _limit(q.get("limit"))
        found = await cards(request)
        start, end, more = _page([c.id for c in found], q.get("after_id"), q.get("before_id"), limit)
    except GatewayError as err:
        return _error(err)
    data = [_object(c, policy) for c in found[start:end]]
    return JSONResponse(
        {
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }
    )


async def anthropic_model(request: Request, policy: Policy, cards: Cards, model: str) -> JSONResponse:
    try:
        for card in await cards(request):
            if card.id == model:
                return JSONResponse(_object(card, policy))
        raise ModelNotFoundError.of(model)
    except GatewayError as err:
        return _error(err)
