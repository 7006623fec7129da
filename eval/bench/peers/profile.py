"""Where our gateway's time goes under load: `python -m eval.bench.peers.profile [--mode unary|stream]`.

Starts the static upstream and Redis on the load core, and our gateway (auth + Redis limiter + metrics,
the `ours` side of the peer benchmark) under cProfile on the gateway core; drives it with wrk at
concurrency 32 for a few seconds, stops it (cProfile writes its stats on the clean SIGTERM exit) and
prints the top functions by own time and by cumulative time. cProfile sees the event-loop thread only
(where a relay spends its time) and roughly doubles the cost of Python calls, so read the shares, not
the absolute figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pstats
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from eval.bench.overhead.wrk import run_wrk, wrk_script
from eval.bench.peers.configs import ours_policy, request_body
from eval.bench.peers.sides import started
from eval.bench.procs import free_port, redis_args, redis_server
from gateway.tenancy.keys import generate_key, hash_key

# The gateway under cProfile, started in-process; SIGUSR2 restarts the profile, SIGUSR1 writes it.
# (`python -m cProfile` writes nothing: uvicorn re-raises SIGTERM after its graceful shutdown.)
_PROFILED = """\
import cProfile, runpy, signal, sys
prof = cProfile.Profile()
def restart(*_):
    global prof
    prof.disable()
    prof = cProfile.Profile()
    prof.enable()
def dump(*_):
    prof.disable()
    prof.dump_stats({out!r})
signal.signal(signal.SIGUSR2, restart)
signal.signal(signal.SIGUSR1, dump)
sys.argv = {argv!r}
prof.enable()
runpy.run_module("gateway", run_name="__main__", alter_sys=True)
"""


def profile(mode: str, seconds: float, top: int, gateway_cpu: int, load_cpu: int) -> str:
    os.sched_setaffinity(0, {load_cpu})
    with tempfile.TemporaryDirectory(prefix="peers-profile-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        up_port, redis_port, gw_port = free_port(), free_port(), free_port()
        up = [sys.executable, "-m", "eval.bench.overhead", "--serve-static", str(up_port)]
        stack.enter_context(started(up, load_cpu, f"http://127.0.0.1:{up_port}/health", work / "up.log"))
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        stack.enter_context(
            started(redis_args(redis_server(), redis_port), load_cpu, redis_url, work / "redis.log")
        )
        key = generate_key()
        policy = work / "ours.yaml"
        policy.write_text(ours_policy(up_port, hash_key(key)))
        out = work / "gateway.prof"
        serve = ["gateway", "serve", "--config", str(policy), "--port", str(gw_port)]
        args = [sys.executable, "-c", _PROFILED.format(out=str(out), argv=serve)]
        env = {"LLMGW_LOG_LEVEL": "warning", "LLMGW_REDIS_URL": redis_url}
        headers = (("Authorization", f"Bearer {key}"),)
        script = wrk_script(work / "load.lua", request_body("small", mode == "stream"), headers)
        with started(args, gateway_cpu, f"http://127.0.0.1:{gw_port}/healthz", work / "gw.log", env) as gw:
            run_wrk(gw_port, script, 32, 1.0)  # warm-up
            os.kill(gw.pid, signal.SIGUSR2)  # reset: profile the measured load only
            run = run_wrk(gw_port, script, 32, seconds)
            os.kill(gw.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        text = io.StringIO()
        stats = pstats.Stats(str(out), stream=text)
        text.write(f"{mode}: {run['rps']:.0f} req/s under cProfile, {run['errors']} errors\n")
        text.write(by_package(stats) + "\n")
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        return text.getvalue()


def package_of(filename: str) -> str:
    """`gateway/relay/pipeline.py` for the project's files, the distribution (`aiohttp`) for installed ones,
    `stdlib:asyncio` for the standard library, `builtins` for C functions."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins"
    path = Path(filename)
    parts = path.parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    for root in ("gateway", "ratelimit", "router", "cache", "pools"):
        if root in parts:
            return "/".join(parts[parts.index(root) :])
    return "stdlib:" + (parts[-2] if parts[-1] == "__init__.py" else path.stem)


def by_package(stats: pstats.Stats, top: int = 25) -> str:
    """Own (exclusive) time summed per package or project module, largest first, as shares."""
    own: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, tottime, _, _) in raw.items():
        key = package_of(filename)
        own[key] = own.get(key, 0.0) + tottime
    total = sum(own.values()) or 1.0
    rows = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    lines = [f"own time by package/module (total {total:.2f} s profiled):"]
    lines += [f"  {share / total:6.1%}  {share:6.3f} s  {name}" for name, share in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.peers.profile", description=__doc__.split("\n", 1)[0]
    )
    p.add_argument("--mode", choices=("unary", "stream"), default="unary")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of load (default 5)")
    p.add_argument("--top", type=int, default=30, help="functions listed per ordering (default 30)")
    p.add_argument("--gateway-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    args = p.parse_args(argv)
    print(profile(args.mode, args.seconds, args.top, args.gateway_cpu, args.load_cpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
