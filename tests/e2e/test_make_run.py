"""`make run`'s stack (scripts/dev-run.sh): two simulators, the gateway, auth on, a printed demo key."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support.poll import wait_until
from tests.support.procs import ROOT, free_port

pytestmark = pytest.mark.e2e


def _busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_make_run_serves_both_pools_with_a_demo_key(tmp_path: Path) -> None:
    if _busy(8001) or _busy(8002):
        pytest.skip("ports 8001/8002 (the example config's simulators) are in use")
    port = free_port()
    env = {**os.environ, "PORT": str(port), "BIN": str(Path(sys.executable).parent)}
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "dev-run.sh")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:

        def demo_key() -> str | None:
            m = re.search(r"demo API key: (sk-[A-Za-z0-9_-]+)", log.read_text())
            return m.group(1) if m else None

        def alive() -> None:
            assert proc.poll() is None, log.read_text()

        key = wait_until(demo_key, lambda: f"the demo API key:\n{log.read_text()}", timeout=60, fail=alive)
        base = f"http://127.0.0.1:{port}/v1"
        for alias in ("small", "large"):
            reply = OpenAI(base_url=base, api_key=key, max_retries=0).chat.completions.create(
                model=alias, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
            assert reply.model == alias and reply.choices[0].message.content
        assert httpx.get(f"{base}/models", timeout=5).status_code == 401
        models = httpx.get(f"{base}/models", headers={"authorization": f"Bearer {key}"}, timeout=5).json()
        assert {m["id"] for m in models["data"]} == {
            "small", "large", "auto", "support", "small:support", "small:legal"
        }  # fmt: skip
        assert {m["parent"] for m in models["data"] if ":" in m["id"]} == {"small"}
        # The small pool's LoRA adapters: by their alias and as `small:<adapter>`.
        client = OpenAI(base_url=base, api_key=key, max_retries=0)
        for alias, served in (("support", "support"), ("small:legal", "legal")):
            reply = client.chat.completions.create(
                model=alias, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
            assert reply.model == served and reply.choices[0].message.content
        # The routed alias: the router model picks a pool and says which.
        routed = httpx.post(
            f"{base}/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "Prove Fermat's last theorem."}]},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert routed.status_code == 200, routed.text
        assert routed.headers["x-llmgw-tier"] in {"small", "large"}
        assert 0 <= float(routed.headers["x-llmgw-difficulty"]) <= 1
        no_key = httpx.post(f"{base}/chat/completions", json={"model": "small", "messages": []}, timeout=5)
        assert no_key.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).chat.completions.create(
                model="small", messages=[{"role": "user", "content": "Hi"}]
            )
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_until(
        lambda: not (_busy(8001) or _busy(8002) or _busy(port)),
        "make run's processes to go (it left them behind)",
        timeout=10,
        interval=0.1,
    )
