"""Error bodies: the engine's exact ones (vLLM 0.32, measured; the simulator must match) and what the
gateway makes of them (OpenAI-shaped errors a client's SDK raises as the right exception class)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conformance.conftest import Backend

pytestmark = pytest.mark.conformance

USER: Any = [{"role": "user", "content": "hello there"}]
LONG: Any = [{"role": "user", "content": "word " * 1100}]
TOO_LONG = (
    "This model's maximum context length is 1024 tokens. However, your prompt contains at least 1025 input "
    "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
    "prompt. (parameter=input_tokens, value=1025)"
)
TOO_MANY = (
    "max_tokens=5000 cannot be greater than max_model_len=1024. Please request fewer output tokens. "
    "(parameter=max_tokens, value=5000)"
)
LOGPROBS = (
    "Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)"
)

# (path, body) -> (status, type, param, message or its start)
CASES: list[tuple[str, dict[str, Any], tuple[int, str, str | None, str]]] = [
    (
        "/v1/chat/completions",
        {"model": "nope", "messages": USER},
        (404, "NotFoundError", "model", "The model `nope` does not exist. Valid aliases: tiny."),
    ),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": USER, "max_tokens": 5000},
        (400, "BadRequestError", "max_tokens", TOO_MANY),
    ),
    (
        "/v1/completions",
        {"model": "tiny", "prompt": "hi", "max_tokens": 5000},
        (400, "BadRequestError", "max_tokens", TOO_MANY),
    ),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": LONG, "max_tokens": 5},
        (400, "BadRequestError", "input_tokens", TOO_LONG),
    ),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": USER, "logprobs": True, "top_logprobs": 25},
        (400, "BadRequestError", "logprobs", LOGPROBS),
    ),
    (
        "/v1/chat/completions",
        {"model": "tiny"},
        (
            400,
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages'",
        ),
    ),
]
BAD_JSON = b'{"model":"tiny","messages":[{"role":'  # 36 bytes: the decoder fails at offset 36


@pytest.mark.parametrize(("path", "body", "want"), CASES, ids=[c[2][2] or "none" for c in CASES])
def test_engine_error_bodies(
    backend: Backend, path: str, body: dict[str, Any], want: tuple[int, str, str | None, str]
) -> None:
    status, kind, param, message = want
    resp = httpx.post(backend.replicas[0] + path, json=body, timeout=30)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (kind, param, status)
    assert error["message"].startswith(message), error["message"]


def test_engine_bad_json_and_unknown_path(backend: Backend) -> None:
    resp = httpx.post(
        backend.replicas[0] + "/v1/chat/completions",
        content=BAD_JSON,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("Bad Request", "body.36", 400)
    assert error["message"].startswith("1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.36'")
    missing = httpx.post(backend.replicas[0] + "/v1/nope", json={}, timeout=30)
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


def test_prompt_plus_max_tokens_over_the_context_is_capped(backend: Backend) -> None:
    """vLLM 0.32 answers 200 with the output cut to what the context leaves (finish_reason length)."""
    prompt = list(range(5, 1005))  # 1,000 token ids: counted exactly by both backends
    for client in (backend.direct(), backend.through_gateway()):
        comp = client.completions.create(
            model="tiny", prompt=prompt, max_tokens=100, extra_body={"ignore_eos": True}
        )
        assert comp.usage is not None
        assert (comp.usage.prompt_tokens, comp.usage.completion_tokens) == (1000, 24)
        assert comp.choices[0].finish_reason == "length"


GATEWAY_CASES = [(path, body, want[0]) for path, body, want in CASES[3:]]  # those the engine refuses


@pytest.mark.parametrize(("path", "body", "status"), GATEWAY_CASES, ids=["too_long", "logprobs", "missing"])
def test_gateway_maps_engine_errors_to_openai_errors(
    backend: Backend, path: str, body: dict[str, Any], status: int
) -> None:
    resp = httpx.post(
        backend.gateway + path,
        json=body,
        headers={"authorization": f"Bearer {backend.api_key}"},
        timeout=30,
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error", error
    assert isinstance(error["message"], str) and error["message"]


def test_gateway_clamps_max_tokens_to_the_alias_cap(backend: Backend) -> None:
    """max_tokens over max_model_len is the engine's 400, but the gateway clamps it to the alias cap
    (1,024 here) first, and the engine then caps prompt + output to its context: a 200."""
    comp = backend.through_gateway().completions.create(
        model="tiny", prompt=list(range(5, 1005)), max_tokens=5000, extra_body={"ignore_eos": True}
    )
    assert comp.usage is not None and comp.usage.completion_tokens == 24
    assert comp.choices[0].finish_reason == "length"
