"""wrk (a C load generator) for the throughput figure: the Lua script, the run, its summary."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.bench.overhead.client import CHAT_PATH

_WRK_LUA = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"
{headers}function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_JSON {{\\"requests\\":%d,\\"duration_us\\":%d,\\"connect\\":%d,\\"read\\":%d,\\"write\\":%d," ..
    "\\"status\\":%d,\\"timeout\\":%d,\\"p50_us\\":%d,\\"p90_us\\":%d,\\"p99_us\\":%d,\\"max_us\\":%d}}\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def wrk_script(path: Path, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> Path:
    """The Lua script: POST `body` with `headers` (e.g. `Authorization`), print a JSON summary at the end."""
    lines = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in headers)
    path.write_text(_WRK_LUA.format(body=body.decode(), headers=lines))
    return path


def parse_wrk(stdout: str) -> dict[str, Any]:
    """The JSON line our Lua `done` hook prints, turned into req/s, errors and latency in ms."""
    m = re.search(r"^WRK_JSON (\{.*\})$", stdout, re.MULTILINE)
    if not m:
        raise RuntimeError(f"wrk printed no summary:\n{stdout}")
    raw = json.loads(m.group(1))
    errors = sum(raw[k] for k in ("connect", "read", "write", "status", "timeout"))
    seconds = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"],
        "seconds": round(seconds, 3),
        "rps": round((raw["requests"] - raw["status"]) / seconds, 1) if seconds else 0.0,
        "errors": errors,
        "p50_ms": round(raw["p50_us"] / 1000, 3),
        "p90_ms": round(raw["p90_us"] / 1000, 3),
        "p99_ms": round(raw["p99_us"] / 1000, 3),
        "max_ms": round(raw["max_us"] / 1000, 3),
    }


def run_wrk(port: int, script: Path, conc: int, seconds: float) -> dict[str, Any]:
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(script)]
    proc = subprocess.run(
        [*cmd, f"http://127.0.0.1:{port}{CHAT_PATH}"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr}")
    return parse_wrk(proc.stdout)
