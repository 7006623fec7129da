"""Speculative pools in the chart: one `speculative` value per pool becomes the engine's
`--speculative-config` (vLLM and simulator pools alike) and the policy pool's `speculative`, and the
two say the same thing (`Speculative.engine_config`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_policy
from tests.chart.test_chart_values import SCHEMA_ERROR, refused
from tests.support.chart import HELMS, Doc, helm_template, of_kind, policy_text

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
    "acceptance_window_s": 30,
    "extra": {"draft_tensor_parallel_size": 1},
}
VALUES = {
    "pools": [
        {"name": "small", "model": "m"},
        {"name": "spec-sim", "model": "m", "engine": "sim", "speculative": NGRAM},
        {
            "name": "spec-gpu",
            "model": "m",
            "speculative": {"method": "eagle", "model": "org/draft", "num_speculative_tokens": 2},
        },
    ]
}


def _args(docs: list[Doc], pool: str) -> list[str]:
    [dep] = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith(f"-{pool}")]
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _spec_arg(args: list[str]) -> dict[str, Any] | None:
    found = [a.removeprefix("--speculative-config=") for a in args if a.startswith("--speculative-config=")]
    assert len(found) <= 1
    return json.loads(found[0]) if found else None


@pytest.mark.parametrize("helm", HELMS)
def test_engine_flag_and_policy_agree(helm: str, tmp_path: Path) -> None:
    r = helm_template(VALUES, helm=helm, tmp=tmp_path)
    assert r.ok, r.stderr
    policy = parse_policy(policy_text(r.docs), "configmap")
    pools = {p.name: p for p in policy.pools}
    assert pools["small"].speculative is None
    assert _spec_arg(_args(r.docs, "small")) is None
    sim = pools["spec-sim"].speculative
    assert sim is not None and sim.acceptance_window_s == 30
    assert (
        _spec_arg(_args(r.docs, "spec-sim"))
        == sim.engine_config()
        == {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
            "draft_tensor_parallel_size": 1,
        }
    )
    assert _args(r.docs, "spec-sim")[0] == "sim"  # the simulator takes vLLM's flag
    gpu = pools["spec-gpu"].speculative
    assert gpu is not None
    assert _spec_arg(_args(r.docs, "spec-gpu")) == gpu.engine_config()
    assert gpu.engine_config() == {"method": "eagle", "model": "org/draft", "num_speculative_tokens": 2}


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        pytest.param({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens", id="zero-k"),
        pytest.param({"method": "ngram"}, "num_speculative_tokens", id="method-without-k"),
        pytest.param(
            {"method": "ngram", "num_speculative_tokens": 3, "lookahead": 1}, "lookahead", id="unknown"
        ),
        pytest.param(
            {"method": "ngram", "num_speculative_tokens": 3, "extra": {"a": [1]}}, "extra", id="extra"
        ),
    ],
)
def test_schema_refuses_bad_speculative_values(
    helm: str, spec: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    err = refused({"pools": [{"name": "p", "model": "m", "speculative": spec}]}, helm, tmp_path)
    assert SCHEMA_ERROR.search(err), err
    assert needle in err, err
