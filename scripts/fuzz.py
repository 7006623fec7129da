"""`make fuzz`: schemathesis against the gateway's own OpenAPI document, real processes throughout.

Starts two simulators (instant profile) and a gateway on free ports, then runs schemathesis in
positive and negative mode with the checks that matter for an API edge: no 5xx, every status is a
documented one, content types match, and every body (errors included) matches its schema. Exits
with schemathesis's status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.tenancy.keys import generate_key, hash_key  # noqa: E402
from tests.support.procs import free_port, running, sim_args, write_policy  # noqa: E402

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-examples", type=int, default=40, help="examples per operation")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as es:
        t = Path(tmp)
        sims = {"small": free_port(), "large": free_port()}
        for name, port in sims.items():
            sim = sim_args(port, name, "--profile", "instant", "--output-len-mean", "16")
            es.enter_context(running(sim, f"http://127.0.0.1:{port}/health", log=t / f"sim-{name}.log"))
        key = generate_key()
        tenancy = f"tenancy:\n  keys:\n    - {{id: fuzz, sha256: {hash_key(key)}, org: fuzz, app: fuzz}}\n"
        pools = {n: f"http://127.0.0.1:{p}" for n, p in sims.items()}
        policy = write_policy(t / "policy.yaml", pools, extra_yaml=tenancy)
        gw = free_port()
        gw_args = ["serve", "--config", str(policy), "--port", str(gw)]
        es.enter_context(running(gw_args, f"http://127.0.0.1:{gw}/healthz", log=t / "gateway.log"))
        cmd = [
            str(Path(sys.executable).parent / "schemathesis"),
            "run",
            f"http://127.0.0.1:{gw}/openapi.json",
            "--checks",
            CHECKS,
            "--max-examples",
            str(args.max_examples),
            "--seed",
            str(args.seed),
            "--mode",
            "all",
            "--header",
            f"Authorization: Bearer {key}",
            "--suppress-health-check",
            "all",
        ]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd)
        if rc != 0:
            print((t / "gateway.log").read_text()[-4000:], file=sys.stderr)
        return rc


if __name__ == "__main__":
    raise SystemExit(main())
