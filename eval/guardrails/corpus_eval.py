"""Precision and recall of the input guardrails' detectors on the labelled corpus (issue 31).

    python -m eval.guardrails.corpus_eval [--split test|train|all] [--knn] [--show-errors]

The corpus (eval/guardrails/corpus.jsonl, written by hand, docs/design/025-guardrails.md) has one row
per prompt: `labels` (the categories really present: secrets, pii, injection, hidden_unicode,
exfiltration; empty = benign), `kind` (benign rows: code, math, chat, hard, tool), `role` (user or
tool: a tool row is read as untrusted content) and a fixed `split`: per group, the 30 % of rows with
the smallest BLAKE2b digest of their text are held out (`test`). Rules were written and tuned looking
at the `train` rows only; the figures that count are the held-out ones.

Per detector: precision = flagged rows that carry its label / flagged rows; recall = rows with its label
that it flagged / rows with its label. The false-positive rate on benign = benign rows any detector
flags / benign rows. `--knn` adds the MiniLM kNN injection detector (eval/guardrails/knn.py) next to
the rules' injection detector on the same split.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.guardrails.detectors import DETECTORS

CORPUS = Path(__file__).with_name("corpus.jsonl")


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    labels: frozenset[str]
    kind: str
    role: str
    split: str
    text: str

    @property
    def untrusted(self) -> bool:
        return self.role == "tool"


@dataclass(frozen=True, slots=True)
class Score:
    name: str
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def load(path: Path = CORPUS) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            rows.append(Row(r["id"], frozenset(r["labels"]), r["kind"], r["role"], r["split"], r["text"]))
    return rows


def split(rows: Sequence[Row], which: str) -> list[Row]:
    return list(rows) if which == "all" else [r for r in rows if r.split == which]


Flag = Callable[[Row], bool]


def rules() -> dict[str, Flag]:
    """The shipped detectors, as the gateway runs them."""
    return {d.name: (lambda r, d=d: d.find(r.text, r.untrusted)) for d in DETECTORS}  # type: ignore[misc]


def score(name: str, label: str, flag: Flag, rows: Sequence[Row]) -> tuple[Score, list[Row], list[Row]]:
    """(score, false positives, false negatives) of `flag` against `label`."""
    fps, fns, tp = [], [], 0
    for r in rows:
        hit, truth = flag(r), label in r.labels
        if hit and truth:
            tp += 1
        elif hit:
            fps.append(r)
        elif truth:
            fns.append(r)
    return Score(name, tp, len(fps), len(fns)), fps, fns


def benign_fp_rate(flags: dict[str, Flag], rows: Sequence[Row]) -> tuple[float, list[Row]]:
    benign = [r for r in rows if not r.labels]
    flagged = [r for r in benign if any(f(r) for f in flags.values())]
    return (len(flagged) / len(benign) if benign else 0.0), flagged


def report(rows: Sequence[Row], flags: dict[str, tuple[str, Flag]], show_errors: bool) -> str:
    lines = [f"{'detector':<16} {'label':<15} {'tp':>3} {'fp':>3} {'fn':>3} {'precision':>9} {'recall':>7}"]
    for name, (label, flag) in flags.items():
        s, fps, fns = score(name, label, flag, rows)
        lines.append(
            f"{name:<16} {label:<15} {s.tp:>3} {s.fp:>3} {s.fn:>3} {s.precision:>9.3f} {s.recall:>7.3f}"
        )
        if show_errors:
            lines += [f"    FP {r.id}: {r.text[:90]!r}" for r in fps]
            lines += [f"    FN {r.id}: {r.text[:90]!r}" for r in fns]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.guardrails.corpus_eval", description=__doc__)
    ap.add_argument("--split", choices=("test", "train", "all"), default="test")
    ap.add_argument("--knn", action="store_true", help="also the MiniLM kNN injection detector")
    ap.add_argument("--show-errors", action="store_true")
    args = ap.parse_args(argv)
    corpus = load()
    rows = split(corpus, args.split)
    shipped = rules()
    flags = {name: (name, f) for name, f in shipped.items()}
    if args.knn:
        from eval.guardrails.knn import KnnDetector

        knn = KnnDetector.fit(split(corpus, "train") if args.split != "train" else rows)
        flags["injection_knn"] = ("injection", knn.flag)
    benign = sum(1 for r in rows if not r.labels)
    print(f"corpus {len(corpus)} rows; split {args.split}: {len(rows)} rows, {benign} benign")
    print(report(rows, flags, args.show_errors))
    rate, flagged = benign_fp_rate(shipped, rows)
    print(f"false-positive rate on benign (any shipped detector): {rate:.3%} ({len(flagged)}/{benign})")
    for r in flagged if args.show_errors else ():
        print(f"    benign FP {r.id}: {r.text[:90]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
