"""The policy's `drift` section: defaults, and errors that name the file and the key."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_policy
from pools.drift_answer import CANARY_PROMPTS

BASE = """\
pools:
  - {name: ref, model: m, endpoints: {static: ["http://127.0.0.1:1"]}}
  - {name: new, model: m, endpoints: {static: ["http://127.0.0.1:2"]}}
  - {name: emb, model: e, endpoints: {static: ["http://127.0.0.1:3"]}, serves: [embeddings]}
models:
  - {name: m, route: {pool: ref}}
"""


def test_defaults() -> None:
    p = parse_policy(BASE + "drift: {pairs: [{a: ref, b: new}]}\n", "p.yaml")
    assert p.drift is not None
    d = p.drift
    assert (d.every_s, d.max_tokens, d.top_logprobs) == (300.0, 16, 5)
    assert tuple(d.prompts) == CANARY_PROMPTS
    assert d.bound_of(d.pairs[0]).max_mean_abs_logprob == 0.05
    assert parse_policy(BASE, "p.yaml").drift is None


@pytest.mark.parametrize(
    ("drift", "says"),
    [
        ("{pairs: [{a: ref, b: nope}]}", "p.yaml:7: drift.pairs[0].b: unknown pool 'nope'"),
        ("{pairs: [{a: ref, b: emb}]}", "drift.pairs[0].b: pool 'emb' does not serve chat"),
        ("{pairs: [{a: ref, b: ref}]}", "drift.pairs[0]: Value error, a pair compares two different pools"),
        ("{pairs: [{a: ref, b: new}, {a: ref, b: new}]}", "drift.pairs[1]: pair ref/new is given twice"),
        ("{pairs: []}", "drift.pairs: List should have at least 1 item"),
        (
            "{pairs: [{a: ref, b: new}], every_s: 0.5}",
            "drift.every_s: Input should be greater than or equal to 1",
        ),
        ("{pairs: [{a: ref, b: new}], top_logprobs: 25}", "drift.top_logprobs: Input should be less than"),
        ("{pairs: [{a: ref, b: new}], bound: {max_kl: -1}}", "drift.bound.max_kl"),
        ("{pairs: [{a: ref, b: new, speed: 1}]}", "drift.pairs[0].speed: unknown key"),
        ("{pairs: [{a: ref, b: new}], prompts: ['']}", "drift.prompts[0]: String should have at least 1"),
    ],
)
def test_errors_name_the_file_and_the_key(drift: str, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_policy(BASE + f"drift: {drift}\n", "p.yaml")
    assert says in str(exc.value)
