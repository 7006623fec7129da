"""The drift check's outputs: report.json (format `llmgw-drift/1`), a text table, and drift.png.

report.json holds, per prompt, both continuations (tokens and chosen-token logprobs), the comparison,
the per-position |Δ logprob| over the shared prefix and the prompt scoring; `overall` is
`pools.drift.summarize` over the prompts. The plot shows |Δ logprob| per position for each prompt
(where a prompt's continuations diverge its line ends, marked ×) and the per-prompt KL estimate.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from eval.drift.run import Check, CheckSettings
from eval.drift.targets import Target
from pools.drift import Step, position_deltas

FORMAT = "llmgw-drift/1"


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no NaN/inf


def _steps(steps: list[Step]) -> dict[str, Any]:
    return {"tokens": [s.token for s in steps], "logprobs": [_num(s.logprob) for s in steps]}


def to_json(check: Check, a: Target, b: Target, s: CheckSettings) -> dict[str, Any]:
    prompts = []
    for r in check.results:
        prompts.append(
            {
                "prompt": r.prompt,
                "a": _steps(r.a),
                "b": _steps(r.b),
                "comparison": dataclasses.asdict(r.comparison),
                "abs_logprob_deltas": position_deltas(r.a, r.b),
                "prompt_logprobs": dataclasses.asdict(r.prompt_score) if r.prompt_score else None,
            }
        )
    return {
        "format": FORMAT,
        "a": {"label": a.label, "url": a.url, "model": a.model},
        "b": {"label": b.label, "url": b.url, "model": b.model},
        "settings": {**dataclasses.asdict(s), "temperature": 0},
        "prompt_logprobs_returned": check.prompt_logprobs,
        "overall": {
            **dataclasses.asdict(check.summary),
            "prompt_logprobs": dataclasses.asdict(check.prompt_score) if check.prompt_score else None,
        },
        "prompts": prompts,
    }


def table(check: Check) -> str:
    head = f"{'#':>2} {'len a/b':>8} {'match':>5} {'div@':>5} {'mean|Δlp|':>10} {'max|Δlp|':>9} "
    head += f"{'KL':>9} {'top-k':>6} {'prompt|Δ|':>10}  prompt"
    lines = [head]
    for i, r in enumerate(check.results):
        c = r.comparison
        div = "-" if c.divergence is None else str(c.divergence)
        ps = f"{r.prompt_score.mean_abs_logprob:10.5f}" if r.prompt_score else f"{'n/a':>10}"
        text = r.prompt if len(r.prompt) <= 40 else r.prompt[:37] + "..."
        lines.append(
            f"{i:>2} {f'{c.length_a}/{c.length_b}':>8} {('yes' if c.match else 'no'):>5} {div:>5} "
            f"{c.mean_abs_logprob:10.5f} {c.max_abs_logprob:9.5f} {c.kl:9.6f} {c.topk_overlap:6.3f} "
            f"{ps}  {text}"
        )
    s = check.summary
    first = "-" if s.first_divergence is None else str(s.first_divergence)
    lines.append(
        f"overall: {s.prompts - s.diverged}/{s.prompts} identical (match ratio {s.match_ratio:.3f}), "
        f"first divergence at {first}, mean |Δ logprob| {s.mean_abs_logprob:.5f} "
        f"(max {s.max_abs_logprob:.5f}, {s.positions} positions), KL {s.kl:.6f}, top-k overlap "
        f"{s.topk_overlap:.3f}"
    )
    if check.prompt_score is not None:
        p = check.prompt_score
        lines.append(
            f"prompt scoring: {p.samples} prompt tokens, mean |Δ logprob| {p.mean_abs_logprob:.5f} "
            f"(max {p.max_abs_logprob:.5f})"
        )
    return "\n".join(lines)


def plot(check: Check, path: Path, title: str) -> None:
    # A bare Figure on the Agg canvas: no pyplot, so no backend is selected for the whole process.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for i, r in enumerate(check.results):
        d = [x if x is not None else math.nan for x in position_deltas(r.a, r.b)]
        (line,) = left.plot(range(len(d)), d, marker=".", label=f"prompt {i}")
        div = r.comparison.divergence
        if div is not None:
            left.plot([div], [0], marker="x", markersize=9, color=line.get_color())
    left.set_xlabel("token position")
    left.set_ylabel("|Δ logprob| of the chosen token")
    left.set_title("shared prefix (× = first divergence)")
    left.legend(fontsize="small")
    right.bar(range(len(check.results)), [r.comparison.kl for r in check.results])
    right.set_xlabel("prompt")
    right.set_ylabel("top-k KL(A‖B), mean over positions")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)


def write(check: Check, a: Target, b: Target, s: CheckSettings, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    report = to_json(check, a, b, s)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(check, out / "drift.png", f"drift: {a.label} vs {b.label}")
    return report
