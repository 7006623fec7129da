"""The input-token reservation is an upper bound of what the pool will count (the window guarantee of
docs/design/004 rests on it), checked against the simulator's own chat template and tokenizer."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eval.sim.requests import render_chat
from eval.sim.tokenizer import count_tokens
from gateway.edge.exchange import Kind
from gateway.relay.normalize import estimate_input_tokens

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=400)
MESSAGES = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": TEXT}),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_chat_estimate_bounds_the_simulators_count(messages: list[dict[str, Any]]) -> None:
    rendered, _ = render_chat(messages, None)
    assert estimate_input_tokens(Kind.CHAT, {"messages": messages}, 1.0) >= count_tokens(rendered)


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_completion_estimate_bounds_the_simulators_count(prompt: str) -> None:
    assert estimate_input_tokens(Kind.COMPLETIONS, {"prompt": prompt}, 1.0) >= count_tokens(prompt)


def test_token_ids_are_counted_exactly() -> None:
    assert estimate_input_tokens(Kind.COMPLETIONS, {"prompt": [1, 2, 3]}, 2.0) == 3
    assert estimate_input_tokens(Kind.COMPLETIONS, {"prompt": [[1, 2], [3]]}, 2.0) == 3


def test_tools_and_non_text_parts_count() -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    tools = {**plain, "tools": [{"type": "function", "function": {"name": "f" * 100}}]}
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    base = estimate_input_tokens(Kind.CHAT, plain, 2.0)
    assert estimate_input_tokens(Kind.CHAT, tools, 2.0) > base + 40
    assert estimate_input_tokens(Kind.CHAT, image, 2.0) > base + 400
