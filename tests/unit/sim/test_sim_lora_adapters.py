"""The simulator's adapter registry (vLLM's load/unload checks and bodies) and adapter-served answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.sim.adapters import (
    AdapterRegistry,
    LoraModule,
    load_request,
    parse_lora_modules,
    unload_request,
    write_adapter,
)
from eval.sim.errors import ApiError
from eval.sim.requests import Context, parse_chat, parse_completion
from tests.unit.sim.conftest import make_context


@pytest.fixture
def registry(tmp_path: Path) -> AdapterRegistry:
    reg = AdapterRegistry(("small", "alias"), max_rank=16)
    reg.load("sql", str(write_adapter(tmp_path / "sql", 8)))
    return reg


def test_parse_lora_modules_takes_both_of_vllms_forms() -> None:
    assert parse_lora_modules(["a=/x", '{"name": "b", "path": "/y", "base_model_name": "m"}', ""]) == [
        LoraModule("a", "/x"),
        LoraModule("b", "/y", "m"),
    ]
    with pytest.raises(ValueError, match="Invalid JSON"):
        parse_lora_modules(["{nope"])
    with pytest.raises(ValueError, match="Invalid fields"):
        parse_lora_modules(['{"name": "a"}'])


def test_load_answers_like_vllm(registry: AdapterRegistry, tmp_path: Path) -> None:
    path = str(write_adapter(tmp_path / "b"))
    assert load_request(registry, {"lora_name": "b", "lora_path": path}) == (
        "Success: LoRA adapter 'b' added successfully."
    )
    with pytest.raises(ApiError) as dup:
        registry.load("b", path)
    assert dup.value.status == 400 and dup.value.type == "InvalidUserInput"
    assert "has already been loaded" in dup.value.message
    registry.load("b", path, inplace=True)  # in place: allowed, same id
    with pytest.raises(ApiError) as base:
        registry.load("small", path)
    assert base.value.status == 400 and "conflicts with a served base model" in base.value.message
    with pytest.raises(ApiError) as missing:
        registry.load("c", str(tmp_path / "none"))
    assert missing.value.status == 404 and missing.value.type == "NotFoundError"
    assert missing.value.message == f"Loading lora c failed: No adapter found for {tmp_path / 'none'}"
    with pytest.raises(ApiError) as rank:
        registry.load("big", str(write_adapter(tmp_path / "big", 32)))
    assert rank.value.status == 500 and rank.value.message == "LoRA rank 32 is greater than max_lora_rank 16."
    with pytest.raises(ApiError) as field:
        load_request(registry, {"lora_name": "x"})
    assert field.value.status == 400 and field.value.param == "body.lora_path"
    assert list(registry.adapters) == ["sql", "b"]


def test_unload_and_its_404(registry: AdapterRegistry) -> None:
    assert (
        unload_request(registry, {"lora_name": "sql"}) == "Success: LoRA adapter 'sql' removed successfully."
    )
    with pytest.raises(ApiError) as gone:
        unload_request(registry, {"lora_name": "sql"})
    assert gone.value.status == 404 and gone.value.message == "The lora adapter 'sql' cannot be found."


def test_static_modules_that_fail_stop_the_start(tmp_path: Path) -> None:
    reg = AdapterRegistry(("m",), 16)
    with pytest.raises(ValueError, match="No adapter found"):
        reg.load_modules([LoraModule("a", str(tmp_path / "missing"))])


def test_model_cards_name_path_and_parent(registry: AdapterRegistry) -> None:
    (card,) = registry.cards(123, "p")
    assert card["id"] == "sql" and card["parent"] == "small" and card["root"].endswith("/sql")
    assert card["max_model_len"] is None and card["object"] == "model"


def _ctx(registry: AdapterRegistry) -> Context:
    ctx = make_context()
    ctx.adapters = registry
    return ctx


def test_an_adapter_answers_differently_and_deterministically(registry: AdapterRegistry) -> None:
    ctx = _ctx(registry)
    body = {"prompt": "Write a query for the sales table", "max_tokens": 12, "temperature": 0}
    base = parse_completion(ctx, {**body, "model": "small"})
    sql = parse_completion(ctx, {**body, "model": "sql"})
    again = parse_completion(ctx, {**body, "model": "sql"})
    assert base.lora is None and sql.lora == "sql" and sql.model == "sql"
    assert sql.choices[0].text == again.choices[0].text != base.choices[0].text
    # vLLM keys an adapter's cached blocks by the adapter: no prefix-cache sharing with the base model.
    long = {"prompt": "word " * 80, "max_tokens": 2, "model": "sql"}
    assert (
        parse_completion(ctx, long).prompts[0].hashes
        != parse_completion(ctx, {**long, "model": "small"}).prompts[0].hashes
    )


def test_unknown_model_is_still_404_with_adapters(registry: AdapterRegistry) -> None:
    ctx = _ctx(registry)
    with pytest.raises(ApiError) as exc:
        parse_chat(ctx, {"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
    assert exc.value.status == 404 and "`nope` does not exist" in exc.value.message
    registry.unload("sql")
    with pytest.raises(ApiError):
        parse_chat(ctx, {"model": "sql", "messages": [{"role": "user", "content": "hi"}]})
