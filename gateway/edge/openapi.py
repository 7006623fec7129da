"""Request/response schemas for the OpenAPI document of the OpenAI routes.

The hot path never validates through these models (gateway.relay.normalize checks what the gateway
relies on, everything else passes through to the pool); they exist so that the published
OpenAPI document, which `make fuzz` drives schemathesis with, says exactly what the gateway
accepts and answers. `model` is an enum of the deployment's aliases.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatCompletionRequest(_Open):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=8)


class CompletionRequest(_Open):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=8)


class EmbeddingRequest(_Open):
    model: str
    input: str | list[str] | list[int] | list[list[int]]


class ResponsesRequest(_Open):
    """OpenAI Responses (gateway.dialects.responses: what is translated, dropped and refused)."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None


class ResponseObject(_Open):
    id: str
    object: Literal["response"]
    created_at: float
    status: str
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None = None


class AnthropicMessage(_Open):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Open):
    """Anthropic Messages (gateway.dialects.messages: what is translated, dropped and refused)."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None


class CountTokensRequest(_Open):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


class MessageObject(_Open):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[dict[str, Any]]
    model: str
    stop_reason: str | None
    usage: dict[str, Any]


class TokenCount(BaseModel):
    input_tokens: int


class InputTokensRequest(_Open):
    """A Responses request's input, counted (`POST /v1/responses/input_tokens`)."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None


class InputTokens(BaseModel):
    object: Literal["response.input_tokens"]
    input_tokens: int


class Usage(_Open):
    prompt_tokens: int
    completion_tokens: int | None = None
    total_tokens: int


class ChatCompletion(_Open):
    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: Usage | None = None


class Completion(_Open):
    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: Usage | None = None


class EmbeddingList(_Open):
    object: str
    data: list[dict[str, Any]]
    model: str
    usage: Usage | None = None


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error: ErrorBody


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str
    parent: str | None = None  # `<alias>:<adapter>`: the alias it is an adapter of (as vLLM lists adapters)


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


class AnthropicErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["error"]
    error: AnthropicErrorBody


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": ErrorResponse, "description": "OpenAI-shaped error"} for s in statuses}


_STATUSES = (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)
RELAY_ERRORS = error_responses(*_STATUSES)
ANTHROPIC_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": AnthropicErrorResponse, "description": "Anthropic-shaped error"} for s in _STATUSES
}
