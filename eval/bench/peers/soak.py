"""Memory soak (issue 9): our gateway's RSS under its max sustained load, for `--minutes` (default 10).

Target: RSS grows < 5 % between the end of minute 1 (after warm-up) and the end of the run (no leak),
and stays <= 300 MB per worker without the router model loaded. Set-up as in the peer benchmark: the
static upstream and Redis on the load core, ours with auth + Redis limiter + metrics (`ours_policy`,
one worker, so the server pid is the worker) on the gateway core, wrk at concurrency 32 in alternating
unary and streaming runs of `--chunk-seconds`. A thread reads /proc/<pid>/status (VmRSS, RssAnon) and
/proc/<pid>/smaps_rollup (PSS, USS) every `--sample-seconds`; requests served come from wrk's summaries,
interpolated inside a run, so RSS can be read against requests too. `--routed` soaks the routed config
(router model loaded) afterwards, for information only: the 300 MB target excludes the model.

Output: bench-results/soak-<time>.json and soak-<time>.png (RSS over time and over requests) and a short
table. Pure parts (parsing, growth, verdict) are unit-tested in tests/unit/test_peers_soak.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eval.bench.overhead.run import environment
from eval.bench.overhead.wrk import run_wrk, wrk_script
from eval.bench.peers.measure import unique_prompts
from eval.bench.peers.sides import Side, start_all
from eval.bench.procs import ROOT, dump_logs, pinned_cpus

GROWTH_TARGET_PCT = 5.0
RSS_TARGET_MB = 300.0
CONCURRENCY = 32  # the max sustained load of the peer benchmark's throughput runs
MODES = ("unary", "stream")


# --- /proc parsing (pure) -----------------------------------------------------------------------------


def _kb_fields(text: str, keys: Sequence[str]) -> dict[str, int]:
    """`Key:   1234 kB` lines of a /proc file, the wanted keys only, in kB."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key in keys:
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0])
    return out


def parse_status(text: str) -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon and RssFile of /proc/<pid>/status, in MB."""
    kb = _kb_fields(text, ("VmRSS", "VmHWM", "RssAnon", "RssFile"))
    names = {"VmRSS": "rss_mb", "VmHWM": "hwm_mb", "RssAnon": "anon_mb", "RssFile": "file_mb"}
    return {names[k]: round(v / 1024, 2) for k, v in kb.items()}


def parse_smaps_rollup(text: str) -> dict[str, float]:
    """PSS and USS (private clean + private dirty) of /proc/<pid>/smaps_rollup, in MB. USS is what the
    process alone holds: the pages a leak adds, without the shared libraries RSS also counts."""
    kb = _kb_fields(text, ("Pss", "Private_Clean", "Private_Dirty"))
    out: dict[str, float] = {}
    if "Pss" in kb:
        out["pss_mb"] = round(kb["Pss"] / 1024, 2)
    if "Private_Clean" in kb and "Private_Dirty" in kb:
        out["uss_mb"] = round((kb["Private_Clean"] + kb["Private_Dirty"]) / 1024, 2)
    return out


def read_memory(pid: int) -> dict[str, float]:
    """The status figures, plus PSS/USS when smaps_rollup is readable (Linux >= 4.14, same user)."""
    with open(f"/proc/{pid}/status") as f:
        out = parse_status(f.read())
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            out.update(parse_smaps_rollup(f.read()))
    return out


# --- figures (pure) -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Chunk:
    """One wrk run: when it ran (seconds since load start) and what it served."""

    mode: str
    start_s: float
    end_s: float
    requests: int
    errors: int
    rps: float
    p99_ms: float


def requests_at(t: float, chunks: Sequence[Chunk]) -> int:
    """Requests served by `t`: whole chunks before it, a linear share of the chunk running at `t` (wrk
    only reports at the end of a run; within 30 s at a steady rate the error is small)."""
    total = 0.0
    for c in chunks:
        if t >= c.end_s:
            total += c.requests
        elif t > c.start_s and c.end_s > c.start_s:
            total += c.requests * (t - c.start_s) / (c.end_s - c.start_s)
    return round(total)


def value_at(samples: Sequence[dict[str, float]], t: float, key: str = "rss_mb") -> float | None:
    """`key` of the first sample taken at or after `t` (the last one if none is)."""
    if not samples:
        return None
    for s in samples:
        if s["t_s"] >= t and key in s:
            return s[key]
    return samples[-1].get(key)


def growth_pct(start: float | None, end: float | None) -> float | None:
    if start is None or end is None or start <= 0:
        return None
    return round((end - start) / start * 100, 2)


def slope_per_million(
    samples: Sequence[dict[str, float]], after_s: float, key: str = "rss_mb"
) -> float | None:
    """Least-squares MB per million requests after warm-up: a leak shows as a steady positive slope even
    when the end-point growth is inside the target."""
    pts = [(s["requests"], s[key]) for s in samples if s["t_s"] >= after_s and key in s]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return round(sxy / sxx * 1e6, 3)


def summarize(
    samples: Sequence[dict[str, float]], chunks: Sequence[Chunk], warmup_s: float, final_hwm_mb: float | None
) -> dict[str, Any]:
    """RSS after warm-up and at the end, growth between them, maxima, requests and errors."""
    rss = [s["rss_mb"] for s in samples if "rss_mb" in s]
    start, end = value_at(samples, warmup_s), (samples[-1].get("rss_mb") if samples else None)
    uss_start, uss_end = (
        value_at(samples, warmup_s, "uss_mb"),
        (samples[-1].get("uss_mb") if samples else None),
    )
    seconds = sum(c.end_s - c.start_s for c in chunks)
    requests = sum(c.requests for c in chunks)
    return {
        "rss_after_warmup_mb": start,
        "rss_end_mb": end,
        "growth_pct": growth_pct(start, end),
        "uss_after_warmup_mb": uss_start,
        "uss_end_mb": uss_end,
        "uss_growth_pct": growth_pct(uss_start, uss_end),
        "max_rss_sampled_mb": max(rss) if rss else None,
        # VmHWM is the kernel's peak, between samples included (and the start-up peak).
        "hwm_mb": final_hwm_mb,
        "slope_mb_per_million_requests": slope_per_million(samples, warmup_s),
        "requests": requests,
        "errors": sum(c.errors for c in chunks),
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "load_seconds": round(seconds, 1),
    }


def verdict(
    summary: dict[str, Any], growth_target: float = GROWTH_TARGET_PCT, rss_target: float = RSS_TARGET_MB
) -> dict[str, Any]:
    """Pass/fail per target; a figure that is missing fails (no evidence is not a pass). The RSS ceiling
    is checked against the worst of the sampled maximum and the kernel's peak (VmHWM)."""
    growth = summary.get("growth_pct")
    peaks = [v for v in (summary.get("max_rss_sampled_mb"), summary.get("hwm_mb")) if v is not None]
    peak = max(peaks) if peaks else None
    growth_ok = growth is not None and growth < growth_target
    rss_ok = peak is not None and peak <= rss_target
    no_errors = summary.get("errors", 0) == 0
    return {
        "growth_pct": growth,
        "growth_target_pct": growth_target,
        "growth_ok": growth_ok,
        "peak_rss_mb": peak,
        "rss_target_mb": rss_target,
        "rss_ok": rss_ok,
        "no_errors": no_errors,
        "pass": growth_ok and rss_ok and no_errors,
    }


# --- running ------------------------------------------------------------------------------------------


class Sampler:
    """A thread reading the gateway's memory every `interval` seconds."""

    def __init__(self, pid: int, interval: float, t0: float) -> None:
        self.pid, self.interval, self.t0 = pid, interval, t0
        self.samples: list[dict[str, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def take(self) -> None:
        t = time.monotonic() - self.t0
        try:
            mem = read_memory(self.pid)
        except OSError as exc:
            self.errors.append(f"t={t:.0f}s: {exc}")
            return
        self.samples.append({"t_s": round(t, 2), **mem})

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.take()

    def __enter__(self) -> Sampler:
        self.take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.take()


def soak_side(
    side: Side, work: Path, seconds: float, chunk_s: float, sample_s: float, progress: Callable[[str], None]
) -> tuple[list[dict[str, float]], list[Chunk]]:
    """Alternating unary and streaming wrk runs at CONCURRENCY until `seconds` of load, sampled."""
    scripts: dict[str, Path] = {}
    for mode in MODES:
        stream = mode == "stream"
        scripts[mode] = wrk_script(work / f"soak-{side.name}-{mode}.lua", side.body(stream), side.headers)
        if side.unique:
            unique_prompts(scripts[mode], side.body(stream, tag="%s-%d"), uuid.uuid4().hex[:12])
    chunks: list[Chunk] = []
    t0 = time.monotonic()
    with Sampler(side.pid, sample_s, t0) as sampler:
        i = 0
        while (left := seconds - (time.monotonic() - t0)) >= 1.0:
            mode = MODES[i % len(MODES)]
            start = time.monotonic() - t0
            run = run_wrk(side.port, scripts[mode], CONCURRENCY, round(min(chunk_s, left)))
            end = time.monotonic() - t0
            chunks.append(
                Chunk(
                    mode,
                    round(start, 2),
                    round(end, 2),
                    run["requests"],
                    run["errors"],
                    run["rps"],
                    run["p99_ms"],
                )
            )
            last = sampler.samples[-1] if sampler.samples else {}
            progress(
                f"{side.name} {end:6.0f}s {mode:6s} {run['rps']:8.1f} req/s errors {run['errors']}"
                f"  rss {last.get('rss_mb', float('nan')):.1f} MB"
            )
            i += 1
    # Requests are known only once a run has ended, so samples are tagged afterwards.
    samples = [{**s, "requests": requests_at(s["t_s"], chunks)} for s in sampler.samples]
    return samples, chunks


def run_side(
    name: str, args: argparse.Namespace, cpus: tuple[int | None, int | None], progress: Callable[[str], None]
) -> dict[str, Any]:
    """Start the upstream, Redis and one gateway; baseline RSS; the soak; the figures."""
    seconds = args.minutes * 60
    # A smoke run shorter than two warm-ups still reports a growth, over its second half.
    warmup_s = min(args.warmup_seconds, seconds / 2)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        progress(f"starting the upstream, Redis and {name}")
        try:
            side = start_all([name], work, stack, *cpus)[-1]
            time.sleep(args.settle_seconds)  # let start-up allocations settle before the baseline
            baseline = read_memory(side.pid)
            progress(f"{name} baseline rss {baseline.get('rss_mb', 0):.1f} MB (fresh, before load)")
            samples, chunks = soak_side(
                side, work, seconds, args.chunk_seconds, args.sample_seconds, progress
            )
            final = read_memory(side.pid)
        except Exception:
            dump_logs(work)
            raise
    summary = summarize(samples, chunks, warmup_s, final.get("hwm_mb"))
    return {
        "baseline": baseline,
        "warmup_seconds": warmup_s,
        "summary": summary,
        "verdict": verdict(summary),
        "samples": samples,
        "chunks": [asdict(c) for c in chunks],
    }


def plot(report: dict[str, Any], path: Path) -> bool:
    """RSS (and USS) over time and over requests; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (by_t, by_req) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, side in report["sides"].items():
        samples = side["samples"]
        t = [s["t_s"] / 60 for s in samples]
        req = [s["requests"] / 1e6 for s in samples]
        for key, style in (("rss_mb", "-"), ("uss_mb", ":")):
            ys = [s.get(key, float("nan")) for s in samples]
            label = f"{name} {key.removesuffix('_mb').upper()}"
            by_t.plot(t, ys, style, label=label)
            by_req.plot(req, ys, style, label=label)
        by_t.axvline(side["warmup_seconds"] / 60, color="grey", lw=0.8, ls="--")
    for ax, xlabel in ((by_t, "minutes under load"), (by_req, "requests served (millions)")):
        ax.axhline(RSS_TARGET_MB, color="red", lw=0.8, ls="--", label=f"{RSS_TARGET_MB:.0f} MB target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("MB")
        ax.grid(alpha=0.3)
    by_t.legend(fontsize=8)
    fig.suptitle(f"gateway memory at concurrency {CONCURRENCY} (unary/stream alternating)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render_table(report: dict[str, Any]) -> str:
    def f(v: object, fmt: str = ".1f") -> str:
        return format(v, fmt) if isinstance(v, int | float) else "-"

    rows = [
        "| side | baseline MB | after warm-up MB | end MB | growth % | max MB | USS growth % | requests"
        " | errors | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, side in report["sides"].items():
        s, v = side["summary"], side["verdict"]
        info = " (info)" if name != "ours" else ""
        rows.append(
            f"| {name} | {f(side['baseline'].get('rss_mb'))} | {f(s['rss_after_warmup_mb'])}"
            f" | {f(s['rss_end_mb'])}"
            f" | {f(s['growth_pct'], '+.2f')} | {f(v['peak_rss_mb'])} | {f(s['uss_growth_pct'], '+.2f')}"
            f" | {s['requests']} | {s['errors']} | {'PASS' if v['pass'] else 'FAIL'}{info} |"
        )
    return "\n".join(rows)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.peers.soak",
        description="Gateway RSS under max sustained load (issue 9: < 5 % growth, <= 300 MB per worker).",
    )
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of load per side (default 10)")
    p.add_argument("--chunk-seconds", type=float, default=30.0, help="seconds per wrk run (default 30)")
    p.add_argument("--sample-seconds", type=float, default=5.0, help="RSS sampling period (default 5)")
    p.add_argument(
        "--warmup-seconds", type=float, default=60.0, help="growth is measured from here (default 60)"
    )
    p.add_argument("--settle-seconds", type=float, default=2.0, help="idle wait before the baseline RSS")
    p.add_argument("--routed", action="store_true", help="also soak ours with routing (router model; info)")
    p.add_argument("--gateway-cpu", type=int, default=0, help="core the gateway is pinned to (default 0)")
    p.add_argument("--load-cpu", type=int, default=1, help="core of wrk, the upstream and Redis (default 1)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench-results", help="where soak-<time>.* go")
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    started_at = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started_at:6.1f}s] {msg}", file=sys.stderr, flush=True)

    warnings: list[str] = []
    cpus = pinned_cpus(args.gateway_cpu, args.load_cpu)
    if cpus[1] is not None:
        os.sched_setaffinity(0, {cpus[1]})  # this process and wrk, its child, on the load core
    else:
        warnings.append("fewer than 2 usable cpus: nothing pinned")
    if args.minutes * 60 < 2 * args.warmup_seconds:
        warnings.append(f"{args.minutes:g} min: a smoke run, not a measurement (growth over its second half)")
    names = ["ours", "ours-routed"] if args.routed else ["ours"]
    sides = {name: run_side(name, args, cpus, progress) for name in names}
    report: dict[str, Any] = {
        "schema": 1,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - started_at, 1),
        "command": ["python", "-m", "eval.bench.peers.soak", *args_list],
        "config": {
            "minutes": args.minutes,
            "concurrency": CONCURRENCY,
            "load": f"wrk -t1 -c{CONCURRENCY}, alternating unary/stream runs of {args.chunk_seconds:g} s",
            "sample_seconds": args.sample_seconds,
            "warmup_seconds": args.warmup_seconds,
            "gateway": "ours: auth + Redis limiter + metrics, 1 worker"
            " (eval/bench/peers/configs.py ours_policy)",
            "upstream": "static (eval/bench/overhead/static_upstream.py)",
            "gateway_cpu": cpus[0],
            "load_cpu": cpus[1],
        },
        "targets": {
            "growth_pct_below": GROWTH_TARGET_PCT,
            "rss_mb_at_most": RSS_TARGET_MB,
            "judged_side": "ours",
        },
        "environment": environment(),
        "sides": sides,
        "warnings": warnings,
    }
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out_dir / f"soak-{stamp}.json", args.out_dir / f"soak-{stamp}.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    plotted = plot(report, png_path)
    print(render_table(report))
    for w in warnings:
        print(f"warning: {w}")
    print(f"wrote {json_path}" + (f" and {png_path}" if plotted else " (no matplotlib: no PNG)"))
    return 0  # a report, like bench-peers: the verdict is in the table and the JSON


if __name__ == "__main__":
    raise SystemExit(main())
