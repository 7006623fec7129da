"""Property: for any request shape, the gateway's reservation covers what the engine then reports.

Shapes are generated (chat and completions; `n`, `best_of`; prompts as a string, a list of strings,
token ids, a list of token-id lists; `max_tokens`; streamed or not), prepared by the gateway's own
`prepare` and reserved by its own estimate (uncalibrated, as a fresh gateway reserves), then sent
to a real `llmgw sim` process with the official OpenAI SDK. The simulator counts usage as vLLM does
(prompt tokens summed over the prompts, a token-id prompt exactly as long as it is, completion tokens
over every choice); `ignore_eos` makes every choice run to `max_tokens`, the worst case.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.budget.estimate import PoolEstimate
from gateway.config import Model, OutputTokens, Route
from gateway.edge.exchange import Kind
from gateway.relay.normalize import prepare
from tests.support.stack import Stack

MODEL = Model(name="sim", route=Route(pool="sim"), max_tokens=OutputTokens(default=16, cap=64))

TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=300
)
IDS = st.lists(st.integers(0, 200_000), min_size=1, max_size=40)
PROMPT = st.one_of(
    TEXT,
    st.lists(TEXT, min_size=1, max_size=20),
    IDS,
    st.lists(IDS, min_size=1, max_size=8),
)
MESSAGES = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": TEXT}),
    min_size=1,
    max_size=4,
)


@st.composite
def shapes(draw: st.DrawFn) -> tuple[Kind, dict[str, Any]]:
    kind = draw(st.sampled_from([Kind.CHAT, Kind.COMPLETIONS]))
    n = draw(st.integers(1, 4))
    body: dict[str, Any] = {"model": "sim", "n": n, "ignore_eos": True}
    if kind is Kind.CHAT:
        body["messages"] = draw(MESSAGES)
    else:
        body["prompt"] = draw(PROMPT)
        best_of = draw(st.one_of(st.none(), st.integers(n, n + 3)))
        if best_of is not None:
            body["best_of"] = best_of
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 64)))
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if draw(st.booleans()):
        body["stream"] = True
    return kind, body


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with Stack(tmp_path_factory.mktemp("sim")) as s:
        url = s.sim("sim", "--profile", "instant", name="sim").url
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)


def reported(client: openai.OpenAI, kind: Kind, body: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) the simulator reports for `body` (already prepared)."""
    sent = {k: v for k, v in body.items() if k not in ("model", "ignore_eos")}
    api: Any = client.chat.completions if kind is Kind.CHAT else client.completions
    if sent.get("stream"):
        usage = None
        for chunk in api.create(model="sim", **sent, extra_body={"ignore_eos": True}):
            usage = chunk.usage or usage
    else:
        usage = api.create(model="sim", **sent, extra_body={"ignore_eos": True}).usage
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes())
def test_the_reservation_covers_what_the_engine_reports(
    sim: openai.OpenAI, shape: tuple[Kind, dict[str, Any]]
) -> None:
    kind, body = shape
    prep = prepare(kind, copy.deepcopy(body), MODEL, "sim")
    assert prep.max_tokens is not None
    output = prep.max_tokens * prep.outputs
    estimate = PoolEstimate(1.0).tokens(prep.size)  # a fresh gateway's estimate: no calibration yet
    prompt_tokens, completion_tokens = reported(sim, kind, prep.body)
    assert prompt_tokens <= estimate, (body, prep.size)
    assert completion_tokens <= output, (body, prep.outputs)
    # Every choice ran to max_tokens: the output reservation is exact unless best_of > n.
    if body.get("best_of", body["n"]) == body["n"]:
        assert completion_tokens == output, (body, prep.outputs)
