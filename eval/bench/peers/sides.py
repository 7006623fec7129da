"""Starting the sides: the upstream, Redis, our gateway (two policies), LiteLLM, Portkey and the floor.

Every gateway runs under `taskset -c GATEWAY_CPU` (so every thread it ever starts, Node's and uvicorn's
included, is on that core); the upstream and Redis share the load core with the load generator. Peers
come from `.tools/peers` (scripts/install-peers), never from the project's .venv.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.bench.overhead.client import MODEL, raw_request
from eval.bench.peers.configs import (
    ROUTED_MODEL,
    litellm_config,
    litellm_master_key,
    ours_policy,
    ours_routed_policy,
    portkey_headers,
    quiet_log_config,
    request_body,
)
from eval.bench.procs import ROOT, free_port, redis_args, redis_server, spawned
from gateway.tenancy.keys import generate_key, hash_key

PEERS_DIR = ROOT / ".tools" / "peers"
LITELLM_BIN = PEERS_DIR / "venv" / "bin" / "litellm"
PORTKEY_JS = PEERS_DIR / "portkey" / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
GATEWAYS = ("ours", "ours-spec", "ours-routed", "litellm", "portkey", "floor")
START_TIMEOUT_S = 120.0  # LiteLLM imports for ~10 s on an idle core, much longer on a busy one


@dataclass(frozen=True, slots=True)
class Side:
    """One thing the load is sent to; `pid` is the process whose CPU time a run is charged to."""

    name: str
    port: int
    pid: int
    model: str = MODEL
    headers: tuple[tuple[str, str], ...] = ()
    # Every request with a prompt never sent before: the router caches difficulty per prompt text, and
    # a benchmark that repeats one prompt would measure that cache, not the routing decision.
    unique: bool = False

    def body(self, stream: bool, tag: str = "") -> bytes:
        return request_body(self.model, stream, tag)

    def requests(self, stream: bool) -> Callable[[], bytes]:
        """The request bytes to send next: always the same, or (`unique`) a new prompt each call."""
        if not self.unique:
            raw = raw_request(self.port, self.body(stream), self.headers)
            return lambda: raw
        run = uuid.uuid4().hex[:12]  # unique across runs and rounds, not just within one batch
        counter = itertools.count()
        return lambda: raw_request(self.port, self.body(stream, f"{run}-{next(counter)}"), self.headers)


def missing_peers(names: Sequence[str]) -> list[str]:
    """Peers asked for that scripts/install-peers has not installed."""
    need = {"litellm": LITELLM_BIN, "portkey": PORTKEY_JS}
    return [n for n in names if n in need and not need[n].exists()]


def started(
    args: Sequence[str], cpu: int | None, ready: str, log: Path, env: dict[str, str] | None = None
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """`spawned` (eval/bench/procs.py) with the peers' start-up timeout."""
    return spawned(args, cpu, ready, log, env, timeout=START_TIMEOUT_S)


def start_all(
    names: Sequence[str],
    work: Path,
    stack: contextlib.ExitStack,
    gateway_cpu: int | None,
    load_cpu: int | None,
) -> list[Side]:
    """The upstream (`direct`) first, then each named gateway in `names` order."""
    up_port = free_port()
    up_args = [sys.executable, "-m", "eval.bench.overhead", "--serve-static", str(up_port)]
    up = stack.enter_context(
        started(up_args, load_cpu, f"http://127.0.0.1:{up_port}/health", work / "upstream.log")
    )
    sides = [Side("direct", up_port, up.pid)]
    redis_url = ""
    if {"ours", "ours-spec", "ours-routed"} & set(names):
        redis_port = free_port()
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        server = redis_server()
        stack.enter_context(started(redis_args(server, redis_port), load_cpu, redis_url, work / "redis.log"))
    key = generate_key()
    for name in names:
        port = free_port()
        log = work / f"{name}.log"
        if name in ("ours", "ours-spec", "ours-routed"):
            policy = work / f"{name}.yaml"
            if name == "ours-routed":
                policy.write_text(ours_routed_policy(up_port, hash_key(key)))
            else:
                policy.write_text(ours_policy(up_port, hash_key(key), speculative=name == "ours-spec"))
            args = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)]
            env = {"LLMGW_LOG_LEVEL": "warning", "LLMGW_REDIS_URL": redis_url, "HF_HUB_OFFLINE": "1"}
            proc = stack.enter_context(
                started(args, gateway_cpu, f"http://127.0.0.1:{port}/healthz", log, env)
            )
            model = ROUTED_MODEL if name == "ours-routed" else MODEL
            auth = (("Authorization", f"Bearer {key}"),)
            sides.append(Side(name, port, proc.pid, model, auth, unique=name == "ours-routed"))
        elif name == "litellm":
            master = litellm_master_key()
            (work / "litellm.yaml").write_text(litellm_config(up_port, master))
            (work / "litellm-log.json").write_text(quiet_log_config())
            args = [str(LITELLM_BIN), "--config", str(work / "litellm.yaml"), "--host", "127.0.0.1"]
            args += [
                "--port",
                str(port),
                "--num_workers",
                "1",
                "--log_config",
                str(work / "litellm-log.json"),
            ]
            # Offline: the bundled price map, no hub look-ups (shared/tooling.md).
            env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "LITELLM_LOG": "ERROR"}
            proc = stack.enter_context(
                started(args, gateway_cpu, f"http://127.0.0.1:{port}/health/liveliness", log, env)
            )
            sides.append(Side(name, port, proc.pid, MODEL, (("Authorization", f"Bearer {master}"),)))
        elif name == "portkey":
            node = shutil.which("node") or "node"
            args = [node, str(PORTKEY_JS), f"--port={port}", "--headless"]
            proc = stack.enter_context(started(args, gateway_cpu, f"http://127.0.0.1:{port}/", log))
            sides.append(Side(name, port, proc.pid, MODEL, portkey_headers(up_port)))
        elif name == "floor":
            args = [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "eval.bench.peers.floor:create_app",
                "--port",
                str(port),
            ]
            args += ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
            env = {"FLOOR_UPSTREAM": f"http://127.0.0.1:{up_port}"}
            proc = stack.enter_context(started(args, gateway_cpu, f"http://127.0.0.1:{port}/", log, env))
            sides.append(Side(name, port, proc.pid))
        else:
            raise ValueError(f"unknown gateway {name!r} (known: {', '.join(GATEWAYS)})")
    return sides
