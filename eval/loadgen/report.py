"""The bench report: one JSON document for a run or a sweep, and its text rendering for the terminal.

`format` is versioned (`llmgw-bench/1`). Secrets never reach the file: tenant keys are replaced by
`***` in the echoed workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from eval.loadgen.workload import Workload

FORMAT = "llmgw-bench/1"


def workload_echo(workload: Workload, source: str | None) -> dict[str, Any]:
    data = workload.model_dump(mode="json")
    for tenant in data.get("tenants", []):
        if tenant.get("key") is not None:
            tenant["key"] = "***"
    return {"file": source, **data}


def knee_entry(levels: Sequence[dict[str, Any]], index: int | None, fraction: float) -> dict[str, Any]:
    if index is None:
        return {"found": False, "fraction": fraction, "level": None}
    at = levels[index]
    return {
        "found": True,
        "fraction": fraction,
        "level": at["level"],
        "offered_rps": at["offered_rps"],
        "goodput_rps": at["goodput"]["requests_per_s"],
        "slo_attainment": at["goodput"]["slo_attainment"],
        "highest_tested": index == max(range(len(levels)), key=lambda i: levels[i]["level"]["x"]),
    }


def write_json(path: Path, report: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return path


def _ms(dist: dict[str, Any] | None, key: str) -> str:
    return "-" if dist is None else f"{dist[key]:.0f}"


def format_level(s: dict[str, Any]) -> str:
    lvl = s["level"]
    head = f"rate {lvl['rate']:g}/s" if lvl["mode"] == "open" else f"concurrency {lvl['concurrency']}"
    r, t, g, lat = s["requests"], s["throughput"], s["goodput"], s["latency_ms"]
    errors = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "none"
    lines = [
        f"{head}: {r['measured']} measured ({r['warmup_excluded']} warm-up), {r['ok']} ok, errors: {errors}",
        f"  offered {s['offered_rps']:.2f} req/s  throughput {t['requests_per_s']:.2f} req/s  "
        f"in {t['input_tokens_per_s']:.0f} tok/s  out {t['output_tokens_per_s']:.0f} tok/s",
        f"  goodput {g['requests_per_s']:.2f} req/s  SLO attainment {g['slo_attainment'] * 100:.1f} %",
        "  latency ms      p50     p90     p99",
    ]
    for name in ("ttft", "tpot", "e2e"):
        d = lat[name]
        lines.append(f"    {name:<8} {_ms(d, 'p50'):>7} {_ms(d, 'p90'):>7} {_ms(d, 'p99'):>7}")
    lines += [f"  warning: {w}" for w in s["warnings"]]
    return "\n".join(lines)


def format_knee(knee: dict[str, Any]) -> str:
    if not knee["found"]:
        return f"knee: none (SLO attainment < {knee['fraction'] * 100:.0f} % already at the lowest load)"
    lvl = knee["level"]
    where = f"rate {lvl['rate']:g}/s" if lvl["mode"] == "open" else f"concurrency {lvl['concurrency']}"
    note = " (the highest level tested: capacity may be higher)" if knee["highest_tested"] else ""
    return (
        f"knee: {where}, goodput {knee['goodput_rps']:.2f} req/s, "
        f"SLO attainment {knee['slo_attainment'] * 100:.1f} %{note}"
    )
