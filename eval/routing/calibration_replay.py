"""Domain-switch replay of live calibration (issue 28, acceptance 3):

    python -m eval.routing.calibration_replay [--scores F.jsonl ...] [--targets 0.1 0.3 0.5]

Requests of the first file, then of each next file, in file order, are routed strong when their
difficulty reaches `LiveCalibration.cut()` (the shipped difficulty model scores them unless
`--scores` gives `llmgw router score` outputs); the realized strong share of every `--window`
requests after each switch is printed with its distance from the target.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from router.calibration import LiveCalibration

__all__ = ["main", "windows_after_switches"]

_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "routing"
_DEFAULT = ["mmlu_dev.jsonl", "routerbench_arc_challenge_train.jsonl"]


def windows_after_switches(
    segments: Sequence[Sequence[float]], target: float, window: int = 200, calibration_window: int = 1000
) -> list[list[float]]:
    """Per segment after the first: the strong share of each full `window` of its requests."""
    cal = LiveCalibration(target, window=calibration_window)
    out: list[list[float]] = []
    for i, seg in enumerate(segments):
        strong: list[bool] = []
        for d in seg:
            cut = cal.cut()
            strong.append(cut is not None and d >= cut)
            cal.observe(d)
        if i:
            out.append(
                [sum(strong[j : j + window]) / window for j in range(0, len(strong) - window + 1, window)]
            )
    return out


def _read(path: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(str(r["id"]), str(r["prompt"])) for r in rows]


def _scores(files: Sequence[Path], score_files: Sequence[Path]) -> list[list[float]]:
    requests = [_read(f) for f in files]
    if score_files:
        known: dict[str, float] = {}
        for sf in score_files:
            for line in sf.read_text().splitlines():
                rec = json.loads(line)
                known[str(rec["id"])] = float(rec["difficulty"])
        return [[known[rid] for rid, _ in seg] for seg in requests]
    from router.difficulty import DifficultyModel

    model = DifficultyModel.load()
    try:
        return [model.score_many([p for _, p in seg]) for seg in requests]
    finally:
        model.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.routing.calibration_replay")
    ap.add_argument("--data", nargs="+", default=[str(_DATA / f) for f in _DEFAULT], help="in switch order")
    ap.add_argument("--scores", nargs="*", default=[], help='JSONL of {"id","difficulty"} for the data')
    ap.add_argument("--targets", nargs="+", type=float, default=[0.1, 0.3, 0.5])
    ap.add_argument("--window", type=int, default=200)
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.data]
    segments = _scores(files, [Path(s) for s in args.scores])
    worst_all = 0.0
    for target in args.targets:
        for f, shares in zip(files[1:], windows_after_switches(segments, target, args.window), strict=True):
            worst = max((abs(s - target) for s in shares), default=0.0)
            worst_all = max(worst_all, worst)
            cells = " ".join(f"{100 * s:.1f}" for s in shares)
            print(f"target {100 * target:.0f}% -> {f.name}: windows [{cells}] worst {100 * worst:.1f} pts")
    print(f"worst window distance from target: {100 * worst_all:.1f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
