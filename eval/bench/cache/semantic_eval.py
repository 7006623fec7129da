"""Which threshold the semantic cache should ship, measured on hand-written prompt pairs: cosine alone
and cosine AND the lexical verifier (cache.verify.same_question).

    python -m eval.bench.cache.semantic_eval [--data eval/bench/cache/paraphrases.jsonl ...] \
        [--max-tokens 128]
    python -m eval.bench.cache.semantic_eval --data other.jsonl --threshold 0.80  # fixed, no picking

`paraphrases.jsonl`: one pair per line, {"a", "b", "paraphrase": bool, "kind"}. Paraphrases ask the
same thing in other words (support, coding, general knowledge, math, product questions, a few longer
ones); near misses share topic and wording but need another answer (another entity, the opposite
direction, another number, a negation, another programming language...), the cases a semantic cache
gets wrong. Every text is embedded by the router's encoder (router.encoder: the embedding the gateway
already computed for routing is the one the cache reuses), so the threshold fits the vectors served.

Cosine alone cannot separate them (MiniLM mean-pools word vectors: blind to order and negation, and an
entity swap moves the vector little), so the gateway serves a hit only when the cosine clears the
threshold AND `same_question(asked, stored)` accepts the pair. Since v3 the verifier is a whitelist
(equal normal forms: same words after frame, spelling, contraction, number and true-synonym
normalization), so it rejects nearly every reworded paraphrase: expect high precision and low recall;
its rules ("numbers", "added", "order", "words", "empty") name how the normal forms differ.
Both schemes are swept over 0.50..0.99; the threshold to ship is the verified scheme's threshold with
the most recall subject to precision >= --min-precision (0.97, a margin over the 0.95 target), ties to
the lowest threshold (--ties low, the default since v3: the verifier accepts no near miss at any cosine,
so the cosine is only a candidate gate and the highest of equal thresholds would just fit the cosines of
the few hits seen; --ties high picks as for v2).
Also: a cross-validated estimate (threshold picked on half of the pairs, measured on the other half,
repeated), the near misses still served at the shipped threshold by kind, the paraphrases the verifier
rejects by kind and by rule, and the verifier's cost per pair. `--threshold` measures a fixed threshold
on another file (a held-out set). Several --data files are pooled (the threshold is picked on all their
pairs) and each is also measured alone at the shipped threshold. Writes JSON to bench-results/.
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

from cache.verify import why_different
from eval.bench.cache.threshold import Bools, Floats, cross_validate, grid, metrics_at, pick_threshold, sweep

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


def verdicts(pairs: list[Pair]) -> tuple[list[str | None], float]:
    """cache.verify's verdict per pair (None: same question, else the rule that told them apart) and the
    mean cost of one `why_different` call in microseconds (the rules run in full, as same_question's)."""
    started = time.perf_counter()
    reasons = [why_different(p.a, p.b) for p in pairs]
    elapsed = time.perf_counter() - started
    return reasons, 1e6 * elapsed / max(1, len(pairs))


def scheme(
    scores: Floats, labels: Bools, min_precision: float, splits: int, seed: int, low_ties: bool = False
) -> dict[str, Any]:
    """Sweep, shipped threshold and cross-validated estimate for one scoring of the pairs."""
    thresholds = grid()
    rows = sweep(scores, labels, thresholds)
    ship = pick_threshold(rows, min_precision, low_ties)
    with_hits = [m for m in rows if m.hits]
    best = max(with_hits, key=lambda m: (m.precision, -m.threshold)) if with_hits else None
    cv = cross_validate(
        scores, labels, thresholds, min_precision, splits=splits, seed=seed, low_ties=low_ties
    )
    return {
        "sweep": [m.to_json() for m in rows],
        "shipped": ship.to_json() if ship is not None else None,
        "ties": "low" if low_ties else "high",
        "best_precision": best.to_json() if best is not None else None,
        "best_f1": max(rows, key=lambda m: m.f1).to_json(),
        "cross_validated": cv.summary(),
    }


def breakdown(pairs: list[Pair], sims: Floats, reasons: list[str | None], threshold: float) -> dict[str, Any]:
    """At `threshold`: the near misses still served (cosine above and verifier accepting), by kind, and
    the paraphrases above the cosine threshold that the verifier rejects, by kind and by rule."""
    false_hits = [
        (p, s)
        for p, s, r in zip(pairs, sims, reasons, strict=True)
        if not p.paraphrase and s >= threshold and r is None
    ]
    rejected = [
        (p, s, r)
        for p, s, r in zip(pairs, sims, reasons, strict=True)
        if p.paraphrase and s >= threshold and r
    ]
    return {
        "threshold": threshold,
        "false_hits_by_kind": dict(Counter(p.kind for p, _ in false_hits)),
        "false_hits": [
            {"a": p.a, "b": p.b, "kind": p.kind, "cosine": round(float(s), 4)}
            for p, s in sorted(false_hits, key=lambda x: -x[1])
        ],
        "paraphrases_rejected_by_kind": dict(Counter(p.kind for p, _, _ in rejected)),
        "paraphrases_rejected_by_rule": dict(Counter(r for _, _, r in rejected)),
        "paraphrases_rejected": [
            {"a": p.a, "b": p.b, "kind": p.kind, "rule": r, "cosine": round(float(s), 4)}
            for p, s, r in sorted(rejected, key=lambda x: -x[1])
        ],
    }


def verifier_alone(pairs: list[Pair], reasons: list[str | None]) -> dict[str, Any]:
    para = [r for p, r in zip(pairs, reasons, strict=True) if p.paraphrase]
    miss = [r for p, r in zip(pairs, reasons, strict=True) if not p.paraphrase]
    return {
        "paraphrases_accepted": round(sum(r is None for r in para) / max(1, len(para)), 4),
        "near_misses_accepted": round(sum(r is None for r in miss) / max(1, len(miss)), 4),
        "paraphrase_rejections_by_rule": dict(Counter(r for r in para if r)),
        "near_miss_rejections_by_rule": dict(Counter(r for r in miss if r)),
    }


def report(
    pairs: list[Pair],
    sims: Floats,
    reasons: list[str | None],
    min_precision: float,
    splits: int,
    seed: int,
    low_ties: bool = False,
) -> dict[str, Any]:
    """Cosine alone and cosine AND verifier, each swept over 0.50..0.99; the verified scheme's
    threshold is the one to ship."""
    labels = np.asarray([p.paraphrase for p in pairs], dtype=bool)
    accepted = np.asarray([r is None for r in reasons], dtype=bool)
    combined = np.where(accepted, sims, -1.0)
    cosine = scheme(sims, labels, min_precision, splits, seed)
    verified = scheme(combined, labels, min_precision, splits, seed, low_ties)
    ship = verified["shipped"]
    return {
        "pairs": {"paraphrase": int(labels.sum()), "near_miss": int((~labels).sum())},
        "kinds": dict(Counter(f"{'para' if p.paraphrase else 'miss'}:{p.kind}" for p in pairs)),
        "cosine_distribution": {"paraphrase": _dist(sims[labels]), "near_miss": _dist(sims[~labels])},
        "min_precision": min_precision,
        "ties": "low" if low_ties else "high",
        "verifier_alone": verifier_alone(pairs, reasons),
        "cosine_only": cosine,
        "cosine_and_verifier": verified,
        "breakdown": breakdown(pairs, sims, reasons, ship["threshold"]) if ship is not None else None,
    }


def fixed_report(
    pairs: list[Pair], sims: Floats, reasons: list[str | None], threshold: float
) -> dict[str, Any]:
    """One threshold, no picking: what a shipped threshold achieves on another set of pairs."""
    labels = np.asarray([p.paraphrase for p in pairs], dtype=bool)
    accepted = np.asarray([r is None for r in reasons], dtype=bool)
    return {
        "pairs": {"paraphrase": int(labels.sum()), "near_miss": int((~labels).sum())},
        "threshold": threshold,
        "cosine_only": metrics_at(sims, labels, threshold).to_json(),
        "cosine_and_verifier": metrics_at(np.where(accepted, sims, -1.0), labels, threshold).to_json(),
        "verifier_alone": verifier_alone(pairs, reasons),
        "breakdown": breakdown(pairs, sims, reasons, threshold),
    }


def per_file_at(
    paths: list[Path], per_file: list[list[Pair]], sims: Floats, reasons: list[str | None], threshold: float
) -> dict[str, Any]:
    """Each pooled file alone at the threshold picked on all of them (cosine AND verifier)."""
    out: dict[str, Any] = {}
    start = 0
    for path, ps in zip(paths, per_file, strict=True):
        end = start + len(ps)
        labels = np.asarray([p.paraphrase for p in ps], dtype=bool)
        accepted = np.asarray([r is None for r in reasons[start:end]], dtype=bool)
        scores = np.where(accepted, sims[start:end], -1.0)
        out[str(path)] = metrics_at(scores, labels, threshold).to_json()
        start = end
    return out


def _dist(xs: Floats) -> dict[str, float]:
    return {
        "min": round(float(xs.min()), 4),
        "median": round(float(np.median(xs)), 4),
        "max": round(float(xs.max()), 4),
    }


def _row(m: dict[str, Any]) -> str:
    return (
        f"{m['threshold']:>5.2f} {m['tp'] + m['fp']:>5} {m['tp']:>4} {m['fp']:>4} "
        f"{m['precision']:>6.3f} {m['recall']:>6.3f} {m['f1']:>6.3f}"
    )


def _print_scheme(name: str, result: dict[str, Any], min_precision: float) -> None:
    print(f"== {name}")
    print(f"{'thr':>5} {'hits':>5} {'tp':>4} {'fp':>4} {'prec':>6} {'recall':>6} {'f1':>6}")
    ship = result["shipped"]
    for m in result["sweep"]:
        if m["threshold"] * 100 % 5 and not (ship and abs(m["threshold"] - ship["threshold"]) < 0.03):
            continue  # every 0.05, and the neighbourhood of the shipped threshold
        mark = "  <- ship" if ship is not None and m["threshold"] == ship["threshold"] else ""
        print(_row(m) + mark)
    if ship is None:
        best = result["best_precision"]
        print(
            f"NO threshold reaches precision {min_precision}: best precision {best['precision']:.3f} at "
            f"{best['threshold']:.2f} (recall {best['recall']:.3f})"
        )
    else:
        print(
            f"ship {ship['threshold']:.2f}: precision {ship['precision']:.3f}, recall {ship['recall']:.3f} "
            f"(whole set; most recall with precision >= {min_precision}, ties to the {result['ties']}est "
            "threshold)"
        )
    cv = result["cross_validated"]
    if not cv.get("picked"):
        print(f"cross-validated: no half of any of {cv['splits']} splits reaches the target")
    else:
        p, r, t = cv["heldout_precision"], cv["heldout_recall"], cv["threshold"]
        print(
            f"cross-validated ({cv['picked']}/{cv['splits']} half-splits picked a threshold): threshold "
            f"median {t['median']:.2f} [{t['min']:.2f}..{t['p95']:.2f}], held-out precision mean "
            f"{p['mean']:.3f} (p05 {p['p05']:.3f}), recall mean {r['mean']:.3f} (p05 {r['p05']:.3f}), "
            f"precision >= 0.95 in {100 * cv['heldout_precision_ge_0.95']:.0f}% of splits"
        )


def _print_breakdown(b: dict[str, Any]) -> None:
    print(f"at {b['threshold']:.2f}: false hits by kind {b['false_hits_by_kind']}")
    for leak in b["false_hits"]:
        print(f"  false hit ({leak['cosine']:.3f}, {leak['kind']}): {leak['a']!r} / {leak['b']!r}")
    print(
        "paraphrases above the threshold rejected by the verifier: "
        f"by kind {b['paraphrases_rejected_by_kind']}, by rule {b['paraphrases_rejected_by_rule']}"
    )


def print_report(result: dict[str, Any]) -> None:
    print(f"pairs: {result['pairs']}  cosine: {result['cosine_distribution']}")
    print(f"verifier alone: {result['verifier_alone']}  ({result['verify_us_per_pair']:.1f} us/pair)")
    _print_scheme("cosine only", result["cosine_only"], result["min_precision"])
    _print_scheme("cosine AND same_question", result["cosine_and_verifier"], result["min_precision"])
    for path, m in result.get("per_file", {}).items():
        print(f"  {path} at the shipped threshold: precision {m['precision']:.3f} recall {m['recall']:.3f}")
    if result["breakdown"] is not None:
        _print_breakdown(result["breakdown"])


def print_fixed(result: dict[str, Any]) -> None:
    print(f"{result['data']}: pairs {result['pairs']}, fixed threshold {result['threshold']:.2f}")
    for name in ("cosine_only", "cosine_and_verifier"):
        m = result[name]
        print(
            f"  {name:<20} precision {m['precision']:.3f} recall {m['recall']:.3f} "
            f"(tp {m['tp']}, fp {m['fp']})"
        )
    print(f"verifier alone: {result['verifier_alone']}  ({result['verify_us_per_pair']:.1f} us/pair)")
    _print_breakdown(result["breakdown"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench.cache.semantic_eval", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, nargs="+", default=[DEFAULT_DATA], help="pooled when several")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--min-precision", type=float, default=0.97)
    parser.add_argument("--splits", type=int, default=200, help="random half splits (each used both ways)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ties",
        choices=("high", "low"),
        default="low",
        help="among thresholds with equal recall ship the lowest (default: the whitelist verifier, not the "
        "cosine, keeps near misses out) or the highest",
    )
    parser.add_argument(
        "--threshold", type=float, default=None, help="evaluate this fixed threshold on --data (no picking)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    per_file = [load_pairs(path) for path in args.data]
    pairs = [p for ps in per_file for p in ps]
    vectors, encoder_info = embed_all(pairs, args.max_tokens)
    sims = pair_cosines(vectors, pairs)
    reasons, us = verdicts(pairs)
    stem = "+".join(path.stem for path in args.data)
    head = {"data": " ".join(map(str, args.data)), **encoder_info, "verify_us_per_pair": round(us, 2)}
    if args.threshold is not None:
        result = {**head, **fixed_report(pairs, sims, reasons, args.threshold)}
        print_fixed(result)
        out = args.out or Path(f"bench-results/semantic-{stem}-at-{args.threshold:.2f}.json")
    else:
        result = {
            **head,
            **report(pairs, sims, reasons, args.min_precision, args.splits, args.seed, args.ties == "low"),
        }
        ship = result["cosine_and_verifier"]["shipped"]
        if len(per_file) > 1 and ship is not None:
            result["per_file"] = per_file_at(args.data, per_file, sims, reasons, ship["threshold"])
        print_report(result)
        out = args.out or Path("bench-results/semantic-threshold.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
