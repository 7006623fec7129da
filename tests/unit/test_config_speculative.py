"""A pool's `speculative` section: what the engine gets, what is refused (naming file and key)."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_policy

BASE = """\
pools:
  - name: spec
    model: m
    endpoints: {static: ["http://127.0.0.1:8001"]}
    speculative: SPEC
models:
  - {name: m, route: {pool: spec}}
"""


def policy(spec: str) -> str:
    return BASE.replace("SPEC", spec)


def test_engine_config_is_vllms_json_without_the_gateway_keys() -> None:
    p = parse_policy(
        policy(
            "{method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3, prompt_lookup_min: 1,"
            " acceptance_window_s: 30}"
        ),
        "p.yaml",
    )
    spec = p.pools[0].speculative
    assert spec is not None and spec.acceptance_window_s == 30
    assert spec.engine_config() == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
    }


def test_extra_keys_pass_through_to_the_engine() -> None:
    p = parse_policy(
        policy(
            "{method: eagle, model: org/draft, num_speculative_tokens: 2, extra: {"
            "draft_tensor_parallel_size: 1}}"
        ),
        "p.yaml",
    )
    spec = p.pools[0].speculative
    assert spec is not None
    assert spec.engine_config() == {
        "method": "eagle",
        "model": "org/draft",
        "num_speculative_tokens": 2,
        "draft_tensor_parallel_size": 1,
    }


def test_a_pool_without_it_has_none() -> None:
    p = parse_policy(BASE.replace("    speculative: SPEC\n", ""), "p.yaml")
    assert p.pools[0].speculative is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{method: ngram}", "pools[0].speculative.num_speculative_tokens: Field required"),
        ("{method: ngram, num_speculative_tokens: 0}", "pools[0].speculative.num_speculative_tokens"),
        (
            "{method: ngram, num_speculative_tokens: 3, lookahead: 2}",
            "pools[0].speculative.lookahead: unknown key",
        ),
        ("{method: ngram, num_speculative_tokens: 3, model: x}", "ngram proposes from the prompt"),
        (
            "{method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 4, prompt_lookup_max: 2}",
            "prompt_lookup_min (4) is larger than prompt_lookup_max (2)",
        ),
        ("{method: ngram, num_speculative_tokens: 3, extra: {method: x}}", "extra repeats a named key"),
        ("{method: 'Bad Name', num_speculative_tokens: 3}", "pools[0].speculative.method"),
    ],
)
def test_bad_sections_name_the_file_and_key(spec: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(policy(spec), "bad.yaml")
    assert str(info.value).startswith("bad.yaml")
    assert expected in str(info.value)


def test_only_vllm_pools_speculate() -> None:
    text = policy("{method: ngram, num_speculative_tokens: 3}").replace(
        "model: m\n", "model: m\n    engine: openai\n", 1
    )
    with pytest.raises(ConfigError, match="speculative needs engine vllm"):
        parse_policy(text, "bad.yaml")
