"""A pool's `lora` section and routes to adapters: what validates, what is refused (naming the key)."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_policy

POLICY = """\
pools:
  - name: base
    model: tiny
    endpoints: {static: ["http://127.0.0.1:8001"]}
    lora:
      max_loras: 2
      max_rank: 8
      runtime_loading: true
      adapters:
        - name: support-v2
          source: /adapters/support-v2
          rank: 8
          price: {input_per_mtok: 1, output_per_mtok: 2}
        - {name: legal, source: /adapters/legal, rank: 4}
  - name: other
    model: big
    endpoints: {static: ["http://127.0.0.1:8002"]}
    lora:
      adapters: [{name: finance, source: /adapters/finance, rank: 8}]
models:
  - {name: base, route: {pool: base}}
  - {name: support, route: ROUTE}
"""


def policy(route: str = "{pool: base, adapter: support-v2}", **swap: str) -> str:
    text = POLICY.replace("ROUTE", route)
    for old, new in swap.items():
        text = text.replace(old.replace("_", " "), new)
    return text


def test_a_route_names_an_adapter_of_its_pool() -> None:
    p = parse_policy(policy(), "p.yaml")
    lora = p.pools[0].lora
    assert lora is not None and lora.runtime_loading and lora.max_loras == 2
    adapter = lora.adapter("support-v2")
    assert adapter is not None and adapter.price is not None and adapter.price.output_per_mtok == 2
    assert p.models[1].route.adapter == "support-v2"


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("{pool: base, adapter: nope}", "models[1].route.adapter: pool 'base' declares no adapter 'nope'"),
        ("{pool: base, adapter: finance}", "it is pool 'other''s"),
        ("{adapter: legal}", "needs exactly one of pool"),
    ],
)
def test_a_route_to_an_undeclared_adapter_is_refused(route: str, message: str) -> None:
    with pytest.raises(ConfigError, match="p.yaml") as err:
        parse_policy(policy(route), "p.yaml")
    assert message in str(err.value)


def test_an_adapter_on_a_pool_without_lora_is_refused() -> None:
    text = policy().replace("  - {name: support, route: {pool: base, adapter: support-v2}}", "")
    text += "  - {name: x, route: {pool: plain, adapter: legal}}\n"
    text = text.replace(
        "pools:\n", 'pools:\n  - {name: plain, model: m, endpoints: {static: ["http://127.0.0.1:8003"]}}\n'
    )
    with pytest.raises(ConfigError, match="pool 'plain' serves no adapters"):
        parse_policy(text, "p.yaml")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("rank: 4}", "rank: 16}", "rank 16, above max_rank 8"),
        ("name: legal,", "name: support-v2,", "duplicate adapter name 'support-v2'"),
        ("source: /adapters/legal", "source: ''", "at least 1 character"),
        ("name: legal,", "name: tiny,", "named like the base model 'tiny'"),
        ("name: legal,", "name: Legal,", "String should match pattern"),
        ("max_loras: 2", "max_loras: 0", "greater than or equal to 1"),
        ("runtime_loading: true", "runtime_loading: true\n      surprise: 1", "lora.surprise: unknown key"),
        ("[{name: finance, source: /adapters/finance, rank: 8}]", "[]", "at least 1 item"),
    ],
)
def test_bad_lora_sections_are_refused(old: str, new: str, message: str) -> None:
    text = policy()
    assert old in text
    with pytest.raises(ConfigError, match="p.yaml") as err:
        parse_policy(text.replace(old, new, 1), "p.yaml")
    assert message in str(err.value)


def test_lora_needs_a_vllm_engine() -> None:
    text = policy().replace("    model: big\n", "    model: big\n    engine: openai\n")
    with pytest.raises(ConfigError, match="lora needs engine vllm"):
        parse_policy(text, "p.yaml")
