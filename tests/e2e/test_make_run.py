"""`make run`'s stack (scripts/dev-run.sh): two simulators, the gateway, auth on, a printed demo key; and
`make run` as a service (issue 44): every port chosen, a second start refused before it touches the
running stack, SIGTERM to make stops every process it started.

Each test runs the real `make run` (`-o` its install steps: the venv is this test's) on free ports, so
it neither needs nor disturbs the default 8080/8001/8002.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support.poll import wait_until
from tests.support.procs import ROOT, free_port

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent


# make's install steps are skipped (-o): the stack runs from this test's own venv (BIN).
INSTALLED = ("-o", ".venv/.installed-run", "-o", "router/assets/minilm-l6-v2-int8/encoder.json")


def make_run(*variables: str) -> list[str]:
    return ["make", "--no-print-directory", *INSTALLED, "run", f"BIN={BIN}", *variables]


def make_env() -> dict[str, str]:
    """Under `make test` the parent make's jobserver flags are in the environment: not for this make."""
    return {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}


def running(pid: int) -> bool:
    """Alive and not a zombie (a reparented child nobody reaped yet has stopped all the same)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    small: int
    large: int
    mode: str = "sim"
    key: str = ""

    @property
    def state(self) -> Path:
        return ROOT / ".run" / self.mode / str(self.port)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def pids(self) -> dict[str, int]:
        rows = (line.split() for line in (self.state / "pids").read_text().splitlines())
        return {name: int(pid) for pid, name in rows}

    def chat(self, model: str = "small") -> str:
        reply = OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=self.key, max_retries=0)
        answer = reply.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert answer.model == model
        return answer.choices[0].message.content or ""


def start(tmp_path: Path, name: str, port: int, small: int, large: int, *variables: str) -> Run:
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            make_run(f"PORT={port}", f"SIM_PORTS={small},{large}", *variables),
            cwd=ROOT,
            env=make_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the test can always clean up behind it
        )
    return Run(proc, log, port, small, large, mode="vllm" if "VLLM=1" in variables else "sim")


def wait_ready(run: Run, timeout: float = 60) -> None:
    def demo_key() -> str | None:
        m = re.search(r"demo API key: (sk-[A-Za-z0-9_-]+)", run.text())
        return m.group(1) if m else None

    def alive() -> None:
        assert run.proc.poll() is None, run.text()

    key = wait_until(demo_key, lambda: f"the demo API key:\n{run.text()}", timeout=timeout, fail=alive)
    assert key is not None
    run.key = key


def stop(run: Run, sig: signal.Signals = signal.SIGINT) -> None:
    if run.proc.poll() is None:
        os.killpg(run.proc.pid, sig)
    try:
        run.proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()


@contextmanager
def stack(tmp_path: Path, name: str = "run") -> Iterator[Run]:
    run = start(tmp_path, name, free_port(), free_port(), free_port())
    try:
        wait_ready(run)
        yield run
    finally:
        stop(run)
        shutil.rmtree(run.state, ignore_errors=True)  # a test's stack: nobody reads its logs later


def test_make_run_serves_both_pools_with_a_demo_key(tmp_path: Path) -> None:
    with stack(tmp_path) as run:
        port, key = run.port, run.key
        # Not the default ports: the policy was made from config/example.yaml with these.
        policy = (run.state / "policy.yaml").read_text()
        assert f'"http://127.0.0.1:{run.small}"' in policy and f'"http://127.0.0.1:{run.large}"' in policy
        assert ":8001" not in policy and ":8002" not in policy
        assert f"pools: small -> :{run.small}, large -> :{run.large}" in run.text()
        base = f"http://127.0.0.1:{port}/v1"
        for alias in ("small", "large"):
            assert run.chat(alias)
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
        pids = run.pids()
    # Ctrl-C (SIGINT to the whole group, as a terminal sends it) left nothing behind.
    assert set(pids) == {"sim-small", "sim-large", "gateway", "tail"}
    wait_until(
        lambda: not any(running(p) for p in pids.values()),
        lambda: f"make run's processes to go; left: {[n for n, p in pids.items() if running(p)]}",
        timeout=10,
        interval=0.1,
    )


def test_a_second_make_run_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    with stack(tmp_path, "first") as first:
        logs = {p.name: p.read_bytes() for p in first.state.glob("*.log")}
        assert set(logs) == {"gateway.log", "sim-small.log", "sim-large.log"}
        pid = int((first.state / "make-run.pid").read_text())
        cases = {
            # The same command again: the stack's own directory is locked.
            "same": (first.port, first.small, first.large),
            # Another gateway port, the same pools' ports: refused on the ports, before anything starts.
            "pools": (free_port(), first.small, first.large),
        }
        for name, (port, small, large) in cases.items():
            t0 = time.monotonic()
            second = subprocess.run(
                make_run(f"PORT={port}", f"SIM_PORTS={small},{large}"),
                cwd=ROOT,
                env=make_env(),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert second.returncode != 0, (name, second.stdout, second.stderr)
            assert time.monotonic() - t0 < 10  # refused at once: it waited for nothing
            if name == "same":
                assert f"another `make run` (pid {pid}) is already serving on port {port}" in second.stderr
            else:
                for p in (small, large):
                    assert f"port {p} is in use by another `make run` (pid {pid}, " in second.stderr
                assert "nothing was started" in second.stderr
                refused = ROOT / ".run" / "sim" / str(port)
                assert not (refused / "pids").exists()
                shutil.rmtree(refused, ignore_errors=True)
        # The first stack: still answering, its processes the same, its logs whole (appended to only).
        assert first.proc.poll() is None
        assert first.chat("small") and first.chat("large")
        assert int((first.state / "make-run.pid").read_text()) == pid
        for name, before in logs.items():
            assert (first.state / name).read_bytes().startswith(before), name


def test_sigterm_to_make_run_stops_every_process_it_started(tmp_path: Path) -> None:
    with stack(tmp_path) as run:
        pids = run.pids()
        script = int((run.state / "make-run.pid").read_text())
        assert all(running(p) for p in (*pids.values(), script))
        t0 = time.monotonic()
        os.kill(run.proc.pid, signal.SIGTERM)  # make alone, as a service manager would
        assert run.proc.wait(timeout=40) != 0
        took = time.monotonic() - t0
        wait_until(
            lambda: not any(running(p) for p in (*pids.values(), script)),
            lambda: f"every process to go; left: {[n for n, p in pids.items() if running(p)]}",
            timeout=5,
            interval=0.1,
        )
        assert took < 15, took
        assert not (run.state / "make-run.pid").exists()
        for port in (run.port, run.small, run.large):
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_bad_ports_are_refused_before_anything_starts() -> None:
    for variables, message in (
        ({"PORT": "18080", "SIM_PORTS": "18001"}, "SIM_PORTS takes two ports"),
        ({"PORT": "18080", "SIM_PORTS": "18001,18080"}, "must be three different ports"),
        ({"PORT": "http", "SIM_PORTS": "18001 18002"}, "'http' is not a TCP port"),
        (
            {"PORT": "18080", "SIM_PORTS": "18001,18003", "VLLM": "1"},
            "the large pool's port is the small one's + 1",
        ),
    ):
        proc = subprocess.run(
            ["bash", "scripts/dev-run.sh"],
            cwd=ROOT,
            env={**os.environ, "BIN": str(BIN), **variables},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 1 and message in proc.stderr, (variables, proc.stderr)
        assert proc.stderr.startswith("make run: ")
        assert not (ROOT / ".run" / "sim" / "18080").exists()
