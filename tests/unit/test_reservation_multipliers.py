"""`prepare` measures what a reservation multiplies (docs/design/019): prompts x max(n, best_of), on
every endpoint, and refuses a bad multiplier with a 400 naming it (never a 500 further down)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import Model, OutputTokens, Route
from gateway.edge.exchange import Kind
from gateway.errors import InvalidRequestError
from gateway.relay.normalize import MAX_BEST_OF, MAX_N, estimate_input_tokens, prepare

MODEL = Model(name="m", route=Route(pool="p"), max_tokens=OutputTokens(default=16, cap=1000))


def completion(prompt: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": prompt, **extra}


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("one", 1),
        (["a", "b", "c"], 3),
        (["x"] * 100, 100),
        ([1, 2, 3, 4], 1),  # one prompt of token ids
        ([[1, 2], [3], [4, 5, 6]], 3),  # three prompts of token ids
    ],
)
def test_every_prompt_of_a_list_multiplies_the_output(prompt: Any, prompts: int) -> None:
    p = prepare(Kind.COMPLETIONS, completion(prompt, max_tokens=100, n=2), MODEL, "u")
    assert p.outputs == prompts * 2
    assert p.choices == prompts * 2
    assert p.max_tokens == 100


def test_best_of_is_what_is_generated_and_n_what_is_returned() -> None:
    p = prepare(Kind.COMPLETIONS, completion("x", n=2, best_of=5), MODEL, "u")
    assert (p.choices, p.outputs) == (2, 5)
    p = prepare(Kind.CHAT, {"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 3}, MODEL, "u")
    assert (p.choices, p.outputs) == (3, 3)


def test_embeddings_generate_nothing_but_every_input_counts() -> None:
    p = prepare(Kind.EMBEDDINGS, {"model": "m", "input": ["ab", "cd", "ef"]}, MODEL, "u")
    assert p.outputs == 0 and p.max_tokens is None
    one = prepare(Kind.EMBEDDINGS, {"model": "m", "input": "ab"}, MODEL, "u")
    assert p.size.text_bytes == 3 * one.size.text_bytes
    assert p.size.fixed == 3 * one.size.fixed


def test_the_input_estimate_counts_every_prompt() -> None:
    one = estimate_input_tokens(Kind.COMPLETIONS, completion("hello world " * 10), 1.0)
    many = estimate_input_tokens(Kind.COMPLETIONS, completion(["hello world " * 10] * 20), 1.0)
    assert many == 20 * one
    assert estimate_input_tokens(Kind.COMPLETIONS, completion([[1, 2, 3]] * 4), 1.0) == 12


def test_size_separates_wide_characters() -> None:
    p = prepare(Kind.COMPLETIONS, completion("汉字ab"), MODEL, "u")
    assert (p.size.text_bytes, p.size.extra_bytes) == (8, 4)


@pytest.mark.parametrize(
    ("kind", "extra", "param"),
    [
        (Kind.EMBEDDINGS, {"n": "x"}, "n"),  # was a 500: n is multiplied on every endpoint
        (Kind.EMBEDDINGS, {"n": 1.5}, "n"),
        (Kind.COMPLETIONS, {"n": True}, "n"),
        (Kind.COMPLETIONS, {"n": MAX_N + 1}, "n"),
        (Kind.CHAT, {"n": 0}, "n"),
        (Kind.COMPLETIONS, {"best_of": "2"}, "best_of"),
        (Kind.COMPLETIONS, {"best_of": 0}, "best_of"),
        (Kind.COMPLETIONS, {"best_of": MAX_BEST_OF + 1}, "best_of"),
        (Kind.COMPLETIONS, {"n": 3, "best_of": 2}, "best_of"),
    ],
)
def test_bad_multipliers_are_a_400_naming_the_param(kind: Kind, extra: dict[str, Any], param: str) -> None:
    body: dict[str, Any] = {"model": "m", **extra}
    if kind is Kind.CHAT:
        body["messages"] = [{"role": "user", "content": "x"}]
    elif kind is Kind.COMPLETIONS:
        body["prompt"] = "x"
    else:
        body["input"] = "x"
    with pytest.raises(InvalidRequestError) as info:
        prepare(kind, body, MODEL, "u")
    assert info.value.param == param
    assert info.value.status == 400
    assert orjson.loads(info.value.body())["error"]["type"] == "invalid_request_error"
