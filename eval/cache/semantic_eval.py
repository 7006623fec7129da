"""Which cosine threshold the semantic cache should ship, measured on hand-written prompt pairs.

    python -m eval.cache.semantic_eval [--data eval/cache/paraphrases.jsonl] [--max-tokens 128]

`paraphrases.jsonl`: one pair per line, {"a", "b", "paraphrase": bool, "kind"}. Paraphrases ask the
same thing in other words (support, coding, general knowledge, math, product questions, a few longer
ones); near misses share topic and wording but need another answer (another entity, the opposite
direction, another number, a negation, another programming language...), the cases a semantic cache
gets wrong. Every text is embedded by the router's encoder (router.encoder: the embedding the gateway
already computed for routing is the one the cache reuses), so the threshold fits the vectors served.

Reports precision/recall/F1 per threshold 0.80..0.99, the threshold to ship (the lowest from which
precision stays >= --min-precision on the whole set; 0.97 leaves a margin over the 0.95 target), a
cross-validated estimate (threshold picked on half of the pairs, measured on the other half, repeated)
so the reported figure is not fitted to the rows it is measured on, and the near misses that still
score above the shipped threshold. Writes JSON to bench-results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.cache.threshold import Floats, cross_validate, grid, pick_threshold, sweep

DEFAULT_DATA = Path(__file__).resolve().parent / "paraphrases.jsonl"


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    paraphrase: bool
    kind: str


def load_pairs(path: Path) -> list[Pair]:
    pairs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        if not isinstance(raw.get("paraphrase"), bool):
            raise ValueError(f"{path}:{n}: 'paraphrase' must be true or false")
        pairs.append(Pair(str(raw["a"]), str(raw["b"]), raw["paraphrase"], str(raw.get("kind", ""))))
    return pairs


def pair_cosines(vectors: dict[str, Floats], pairs: list[Pair]) -> Floats:
    """Cosine per pair; vectors are normalized here, whatever the encoder returned."""

    def unit(text: str) -> Floats:
        v = np.asarray(vectors[text], dtype=np.float64)
        norm = float(np.linalg.norm(v))
        return v / norm if norm > 0 else v

    return np.asarray([float(unit(p.a) @ unit(p.b)) for p in pairs], dtype=np.float64)


def embed_all(pairs: list[Pair], max_tokens: int) -> tuple[dict[str, Floats], dict[str, Any]]:
    from router.encoder import Encoder

    encoder = Encoder.load()
    texts = sorted({t for p in pairs for t in (p.a, p.b)})
    started = time.perf_counter()
    vectors = {t: np.asarray(encoder.embed_one(t, max_tokens), dtype=np.float64) for t in texts}
    elapsed = time.perf_counter() - started
    norms = np.asarray([np.linalg.norm(v) for v in vectors.values()])
    info = {
        "encoder": encoder.identity.describe(),
        "texts": len(texts),
        "max_tokens": max_tokens,
        "embed_ms_per_text": round(1000 * elapsed / max(1, len(texts)), 2),
        "norm_min": round(float(norms.min()), 5),
        "norm_max": round(float(norms.max()), 5),
    }
    return vectors, info


def report(pairs: list[Pair], sims: Floats, min_precision: float, splits: int, seed: int) -> dict[str, Any]:
    labels = np.asarray([p.paraphrase for p in pairs], dtype=bool)
    thresholds = grid()
    rows = sweep(sims, labels, thresholds)
    ship = pick_threshold(rows, min_precision)
    with_hits = [m for m in rows if m.hits]
    best = max(with_hits, key=lambda m: (m.precision, -m.threshold)) if with_hits else None
    cv = cross_validate(sims, labels, thresholds, min_precision, splits=splits, seed=seed)
    leaks: list[dict[str, Any]] = []
    if ship is not None:
        leaks = [
            {"a": p.a, "b": p.b, "kind": p.kind, "cosine": round(float(s), 4)}
            for p, s in sorted(zip(pairs, sims, strict=True), key=lambda x: -x[1])
            if not p.paraphrase and s >= ship.threshold
        ]
    return {
        "pairs": {"paraphrase": int(labels.sum()), "near_miss": int((~labels).sum())},
        "kinds": dict(Counter(f"{'para' if p.paraphrase else 'miss'}:{p.kind}" for p in pairs)),
        "cosine": {
            "paraphrase": _dist(sims[labels]),
            "near_miss": _dist(sims[~labels]),
        },
        "min_precision": min_precision,
        "sweep": [m.to_json() for m in rows],
        "shipped": ship.to_json() if ship is not None else None,
        "best_precision": best.to_json() if best is not None else None,
        "best_f1": max(rows, key=lambda m: m.f1).to_json(),
        "paraphrase_max_cosine": round(float(sims[labels].max()), 4),
        "near_misses_above_every_paraphrase": int(np.sum(sims[~labels] > sims[labels].max())),
        "cross_validated": cv.summary(),
        "near_misses_above_shipped": leaks,
        "paraphrases_below_shipped": [
            {"a": p.a, "b": p.b, "kind": p.kind, "cosine": round(float(s), 4)}
            for p, s in sorted(zip(pairs, sims, strict=True), key=lambda x: x[1])
            if ship is not None and p.paraphrase and s < ship.threshold
        ][:15],
    }


def _dist(xs: Floats) -> dict[str, float]:
    return {
        "min": round(float(xs.min()), 4),
        "median": round(float(np.median(xs)), 4),
        "max": round(float(xs.max()), 4),
    }


def print_report(result: dict[str, Any]) -> None:
    print(f"pairs: {result['pairs']}  cosine: {result['cosine']}")
    print(f"{'thr':>5} {'hits':>5} {'tp':>4} {'fp':>4} {'prec':>6} {'recall':>6} {'f1':>6}")
    ship = result["shipped"]
    for m in result["sweep"]:
        mark = "  <- ship" if ship is not None and m["threshold"] == ship["threshold"] else ""
        print(
            f"{m['threshold']:>5.2f} {m['tp'] + m['fp']:>5} {m['tp']:>4} {m['fp']:>4} "
            f"{m['precision']:>6.3f} {m['recall']:>6.3f} {m['f1']:>6.3f}{mark}"
        )
    if ship is None:
        best = result["best_precision"]
        print(
            f"NO threshold in the grid reaches precision {result['min_precision']}: best precision "
            f"{best['precision']:.3f} at {best['threshold']:.2f} (recall {best['recall']:.3f}); "
            f"{result['near_misses_above_every_paraphrase']} near misses score above every paraphrase "
            f"(max paraphrase cosine {result['paraphrase_max_cosine']:.3f})"
        )
    else:
        print(
            f"ship {ship['threshold']:.2f}: precision {ship['precision']:.3f}, recall {ship['recall']:.3f} "
            f"(whole set, lowest threshold with precision >= {result['min_precision']} from there up)"
        )
    cv = result["cross_validated"]
    if not cv.get("picked"):
        print(f"cross-validated: no half of any of {cv['splits']} splits reaches the target either")
    else:
        p, r, t = cv["heldout_precision"], cv["heldout_recall"], cv["threshold"]
        print(
            f"cross-validated ({cv['picked']}/{cv['splits']} half-splits picked a threshold): threshold "
            f"median {t['median']:.2f} [{t['min']:.2f}..{t['p95']:.2f}], held-out precision mean "
            f"{p['mean']:.3f} (p05 {p['p05']:.3f}), recall mean {r['mean']:.3f} (p05 {r['p05']:.3f}), "
            f"precision >= 0.95 in {100 * cv['heldout_precision_ge_0.95']:.0f}% of splits"
        )
    for leak in result["near_misses_above_shipped"]:
        where = f"{leak['cosine']:.3f}, {leak['kind']}"
        print(f"  near miss above threshold ({where}): {leak['a']!r} / {leak['b']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.cache.semantic_eval", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--min-precision", type=float, default=0.97)
    parser.add_argument("--splits", type=int, default=200, help="random half splits (each used both ways)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/semantic-threshold.json"))
    args = parser.parse_args(argv)

    pairs = load_pairs(args.data)
    vectors, encoder_info = embed_all(pairs, args.max_tokens)
    sims = pair_cosines(vectors, pairs)
    result = {
        "data": str(args.data),
        **encoder_info,
        **report(pairs, sims, args.min_precision, args.splits, args.seed),
    }
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
