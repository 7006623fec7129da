"""Evaluating the success predictor against today's prior: leave one source out, and N-tier routing.

`llmgw router loso` (leave-one-source-out). Sources: RouteLLM MMLU (mmlu_train + mmlu_dev), MMLU-Pro
(train + dev), CRUXEval, MATH-L5 and each RouterBench file: 7. For each held-out source:

- training data = every other source, minus rows that repeat a held-out prompt (same normalised text
  or a shared 13-word n-gram, eval/routing/success_train.py) and, when RouteLLM MMLU is held out, minus
  every MMLU-Pro `:ori_mmlu` row (README overlap warning). Both routers train on exactly these rows;
- the success predictor (router/success.py) is fit on all their (prompt, model) outcomes, once per
  seed;
- today's prior is retrained with its own recipe (eval/routing/train.py: kNN + ridge + lexical on the
  strong-minus-weak gain, standardised out of fold): primary file RouteLLM MMLU with its pair, or
  MMLU-Pro (gpt-4o / Llama-3.1-8B) when MMLU is held out, every other source as `--pair-data` with its
  pair (SOURCE_PAIRS). It has no random state, so its spread over seeds is 0 by construction;
- both score the held-out source's strong/weak pair by RouteLLM APGR (eval/routing/metrics.py). The
  predictor's routing score is p_strong - p_weak, the expected quality gain of the strong call.

A pair model the predictor never saw is mapped by `resolve`: the exact name, else the same name in
another letter case, else the name it was trained under (the recipe's declared aliases), else a
declared `like` (e.g. a pool "like Meta-Llama-3.1-8B-Instruct"), else the
trained name closest by character similarity (difflib ratio >= 0.6), else the evaluation refuses. On
these 7 sources every pair model is trained under its own name in some other source, so no mapping
is used; the rule is printed when it is.

`llmgw router tiers`: N priced tiers on one evaluation file; the policy routes each prompt to the
cheapest tier whose predicted success is within `tolerance` of the best tier's prediction; a sweep of
the tolerance gives the quality-versus-cost curve, beside the best two-tier policy (the predictor's
gain score between two of the tiers, at every strong share), random routing and the oracle.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from eval.routing.data import Row, kfold_indices, load_rows, rows_with_models
from eval.routing.embed_cache import DEFAULT_CACHE_DIR, embed_texts
from eval.routing.metrics import apgr, routing_curve
from eval.routing.success_train import (
    ORI_MMLU_SUFFIX,
    SuccessConfig,
    build_table,
    fit_table,
    overlap_mask,
)
from eval.routing.train import TrainConfig, component_weights, fit_components, prepare, row_texts
from router.encoder import Encoder
from router.head import Head, empirical_cdf
from router.success import SuccessModel

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

GPT4O = "gpt-4o-2024-05-13"
LLAMA8 = "Meta-Llama-3.1-8B-Instruct"


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    files: tuple[str, ...]
    strong: str
    weak: str


SOURCES: tuple[Source, ...] = (
    Source(
        "mmlu", ("mmlu_train.jsonl", "mmlu_dev.jsonl"), "gpt-4-1106-preview", "mixtral-8x7b-instruct-v0.1"
    ),
    Source("mmlupro", ("mmlupro_train.jsonl", "mmlupro_dev.jsonl"), GPT4O, LLAMA8),
    Source("crux", ("zeroeval_crux.jsonl",), GPT4O, LLAMA8),
    Source("math-l5", ("zeroeval_math_l5.jsonl",), GPT4O, LLAMA8),
    *(
        Source(
            f"routerbench-{t}", (f"routerbench_{t}_train.jsonl",), "gpt-4-1106-preview", "mixtral-8x7b-chat"
        )
        for t in ("arc_challenge", "mbpp", "winograde")
    ),
)


def resolve(
    name: str,
    trained: Sequence[str],
    like: Mapping[str, str] | None = None,
    aliases: Sequence[tuple[str, str]] = (),
) -> tuple[str, str]:
    """(trained model standing for `name`, the rule that chose it); KeyError when nothing fits."""
    if name in trained:
        return name, "exact"
    folded = {m.casefold(): m for m in trained}
    if name.casefold() in folded:
        return folded[name.casefold()], "case-insensitive name"
    declared = {a.casefold(): b.casefold() for a, b in aliases}
    if declared.get(name.casefold()) in folded:
        return folded[declared[name.casefold()]], "trained alias"
    if like and name in like:
        target = like[name]
        if target not in trained:
            raise KeyError(f"{name!r} is declared like {target!r}, which the predictor never saw")
        return target, "declared like"
    close = difflib.get_close_matches(name, list(trained), n=1, cutoff=0.6)
    if close:
        return close[0], "nearest name"
    raise KeyError(f"no trained model stands for {name!r}; declare one with --like")


def gain_score(model: SuccessModel, emb: F32, texts: Sequence[str], strong: str, weak: str) -> F64:
    """p_strong - p_weak: the expected quality gain of calling the strong model (route hardest first)."""
    p = model.predict(emb, texts)
    out: F64 = p[:, model.index(strong)] - p[:, model.index(weak)]
    return out


def weak_fail_score(model: SuccessModel, emb: F32, texts: Sequence[str], strong: str, weak: str) -> F64:
    """1 - p_weak: the chance the cheap answer is wrong, whatever the strong model would do."""
    out: F64 = 1.0 - model.predict(emb, texts)[:, model.index(weak)]
    return out


# The routing scores `loso` reports for the predictor; the first is the headline column.
SCORES = {"gain": gain_score, "weak-fail": weak_fail_score}


def fit_prior(
    primary: Sequence[Row],
    extra: Sequence[tuple[Sequence[Row], str, str]],
    cfg: TrainConfig,
    encoder: Encoder,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
) -> Head:
    """Today's prior recipe (eval/routing/train.py `fit_head`) without its task-CV report: that report
    changes no weight, and skipping it halves the fold fits."""
    ts = prepare(primary, cfg, encoder, (), cache_dir=cache_dir, extra=extra)
    preds = np.zeros((ts.primary, 3), dtype=np.float64)
    extra_idx = np.arange(ts.primary, len(ts.rows), dtype=np.int64)
    for fold_train, test_idx in kfold_indices(ts.rows[: ts.primary], cfg.folds, group_by_task=False):
        comps = fit_components(ts, np.concatenate([fold_train, extra_idx]), cfg)
        texts = [ts.texts[i] for i in test_idx]
        for j, comp in enumerate(comps):
            preds[test_idx, j] = comp.predict(ts.embeddings[test_idx], texts)
    centers = preds.mean(axis=0)
    scales = np.maximum(preds.std(axis=0), 1e-12)
    cdf_raw, cdf_share = empirical_cdf(((preds - centers) / scales) @ np.asarray(component_weights(cfg)))
    return Head(
        components=tuple(fit_components(ts, np.arange(len(ts.rows)), cfg)),
        centers=tuple(float(c) for c in centers),
        scales=tuple(float(s) for s in scales),
        weights=component_weights(cfg),
        cdf_raw=cdf_raw,
        cdf_share=cdf_share,
    )


@dataclass(frozen=True, slots=True)
class Fold:
    held: Source
    eval_rows: tuple[Row, ...]
    train: tuple[tuple[Source, tuple[Row, ...]], ...]
    dropped: Mapping[str, int]


def make_fold(held: Source, loaded: Mapping[str, tuple[Row, ...]]) -> Fold:
    """The held-out source's evaluable rows and every other source's rows minus the overlaps."""
    eval_rows, _ = rows_with_models(loaded[held.name], (held.strong, held.weak))
    held_prompts = [r.prompt for r in loaded[held.name]]
    train: list[tuple[Source, tuple[Row, ...]]] = []
    dropped = {"overlap": 0, "ori_mmlu": 0}
    for source in SOURCES:
        if source.name == held.name:
            continue
        rows = loaded[source.name]
        if held.name == "mmlu":
            kept = tuple(r for r in rows if not r.source.endswith(ORI_MMLU_SUFFIX))
            dropped["ori_mmlu"] += len(rows) - len(kept)
            rows = kept
        mask = overlap_mask([r.prompt for r in rows], held_prompts)
        dropped["overlap"] += int(mask.sum())
        train.append((source, tuple(r for r, bad in zip(rows, mask, strict=True) if not bad)))
    return Fold(held=held, eval_rows=eval_rows, train=tuple(train), dropped=dropped)


def prior_inputs(
    fold: Fold,
) -> tuple[tuple[Row, ...], list[tuple[Sequence[Row], str, str]], TrainConfig]:
    """Primary rows, `--pair-data` groups and config of today's recipe on this fold's training data."""
    by_name = {s.name: (s, rows) for s, rows in fold.train}
    primary_name = "mmlu" if "mmlu" in by_name else "mmlupro"
    primary_source, primary_rows = by_name[primary_name]
    cfg = TrainConfig(strong=primary_source.strong, weak=primary_source.weak)
    extra: list[tuple[Sequence[Row], str, str]] = [
        (rows_with_models(rows, (s.strong, s.weak))[0], s.strong, s.weak)
        for s, rows in fold.train
        if s.name != primary_name
    ]
    return primary_rows, extra, cfg


@dataclass(frozen=True, slots=True)
class FoldResult:
    source: str
    rows: int
    prior: float
    new: tuple[float, ...]  # APGR per seed of the headline score (SCORES' first)
    other: Mapping[str, tuple[float, ...]]  # the other scores' APGR per seed
    mapping: Mapping[str, str]
    dropped: Mapping[str, int]

    @property
    def gain(self) -> float:
        return float(np.mean(self.new)) - self.prior


def evaluate_fold(
    fold: Fold,
    cfg: SuccessConfig,
    seeds: Sequence[int],
    encoder: Encoder,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    like: Mapping[str, str] | None = None,
    with_prior: bool = True,
) -> FoldResult:
    texts = row_texts(fold.eval_rows)
    emb = embed_texts(encoder, texts, cfg.max_tokens, cache_dir=cache_dir)
    strong = np.array([r.outcomes[fold.held.strong].score for r in fold.eval_rows])
    weak = np.array([r.outcomes[fold.held.weak].score for r in fold.eval_rows])
    table, _ = build_table([(s.name, rows) for s, rows in fold.train], aliases=cfg.aliases)
    table = replace(table, emb=embed_texts(encoder, table.texts, cfg.max_tokens, cache_dir=cache_dir))
    (s_name, s_rule), (w_name, w_rule) = (
        resolve(fold.held.strong, table.models, like, cfg.aliases),
        resolve(fold.held.weak, table.models, like, cfg.aliases),
    )
    mapping = {fold.held.strong: f"{s_name} ({s_rule})", fold.held.weak: f"{w_name} ({w_rule})"}
    by_score: dict[str, list[float]] = {name: [] for name in SCORES}
    for seed in seeds:
        model, _ = fit_table(table, replace(cfg, seed=seed))
        for name, score in SCORES.items():
            routed = score(model, emb, texts, s_name, w_name)
            by_score[name].append(apgr(routing_curve(routed, strong, weak)))
    headline, *others = SCORES
    prior = math.nan
    if with_prior:
        primary, extra, tcfg = prior_inputs(fold)
        head = fit_prior(primary, extra, tcfg, encoder, cache_dir)
        prior = apgr(routing_curve(head.raw(emb, texts), strong, weak))
    return FoldResult(
        source=fold.held.name,
        rows=len(fold.eval_rows),
        prior=prior,
        new=tuple(by_score[headline]),
        other={name: tuple(by_score[name]) for name in others},
        mapping=mapping,
        dropped=fold.dropped,
    )


def load_sources(data_dir: Path) -> dict[str, tuple[Row, ...]]:
    return {s.name: load_rows([data_dir / f for f in s.files]) for s in SOURCES}


def _spread(values: Sequence[float]) -> float:
    """Half the range over seeds (3 seeds: the figure moves by at most this either side of the mean)."""
    return (max(values) - min(values)) / 2 if values else math.nan


def loso_table(results: Sequence[FoldResult]) -> str:
    headline, *others = SCORES
    extra = "".join(f" new, {name} score | gain |" for name in others)
    lines = [
        f"| held-out source | rows | prior APGR | new, {headline} score (mean ± spread) | gain |{extra}",
        "|---|---|---|---|---|" + "---|---|" * len(others),
    ]
    for r in results:
        cells = "".join(
            f" {np.mean(r.other[n]):.4f} ± {_spread(r.other[n]):.4f} | {np.mean(r.other[n]) - r.prior:+.4f} |"
            for n in others
        )
        lines.append(
            f"| {r.source} | {r.rows} | {r.prior:.4f} | {np.mean(r.new):.4f} ± {_spread(r.new):.4f} "
            f"| {r.gain:+.4f} |{cells}"
        )
    gains = [r.gain for r in results]
    other_means = "".join(
        f" {np.mean([np.mean(r.other[n]) for r in results]):.4f} | "
        f"{np.mean([np.mean(r.other[n]) - r.prior for r in results]):+.4f} |"
        for n in others
    )
    lines.append(
        f"| **mean** | | {np.mean([r.prior for r in results]):.4f} | "
        f"{np.mean([np.mean(r.new) for r in results]):.4f} | **{np.mean(gains):+.4f}** |{other_means}"
    )
    return "\n".join(lines)


def result_json(r: FoldResult) -> dict[str, Any]:
    return {
        "source": r.source,
        "rows": r.rows,
        "prior_apgr": round(r.prior, 4),
        "new_apgr": [round(x, 4) for x in r.new],
        "new_mean": round(float(np.mean(r.new)), 4),
        "new_spread": round(_spread(r.new), 4),
        "other_scores": {n: [round(x, 4) for x in v] for n, v in r.other.items()},
        "gain": round(r.gain, 4),
        "mapping": dict(r.mapping),
        "dropped": dict(r.dropped),
    }


def tier_policy(p: F64, prices: F64, tolerance: float) -> npt.NDArray[np.int64]:
    """Per row, the cheapest tier whose predicted success is within `tolerance` of the best tier's.

    `p` is (rows, tiers) predicted success, `prices` each tier's cost per call. A tolerance of 0 picks
    the tier predicted best; 1 always the cheapest."""
    best = p.max(axis=1, keepdims=True)
    # 1e-12: a tolerance equal to a difference (0.9 - 0.1 vs 0.8) must count as within it.
    ok = p >= best - tolerance - 1e-12
    out: npt.NDArray[np.int64] = np.argmin(np.where(ok, prices[None, :], np.inf), axis=1).astype(np.int64)
    return out


def _interp_at(points: Sequence[tuple[float, float]], cost: float) -> float:
    """Quality at `cost` on the upper convex hull of (cost, quality) points: mixing two policies at
    random (a share of requests each) realises any point between them, so the hull is attainable."""
    pts = sorted(set(points))
    hull: list[tuple[float, float]] = []
    for pt in pts:
        # Drop points that are not above the segment from the previous hull point (upper hull).
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (pt[1] - y1) - (y2 - y1) * (pt[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(pt)
    # Only the rising part: beyond the best point, spending more never buys quality.
    top = max(range(len(hull)), key=lambda i: (hull[i][1], -hull[i][0]))
    hull = hull[: top + 1]
    xs, ys = [h[0] for h in hull], [h[1] for h in hull]
    if cost < xs[0]:
        return math.nan
    return float(np.interp(cost, xs, ys))


@dataclass(frozen=True, slots=True)
class TierReport:
    models: tuple[str, ...]
    prices: tuple[float, ...]
    single: Mapping[str, tuple[float, float]]  # model -> (cost share of the top tier, quality)
    policy: tuple[tuple[float, float, float], ...]  # (tolerance, cost share, quality)
    two_tier: Mapping[str, tuple[tuple[float, float], ...]]  # "cheap>strong" -> (cost share, quality)
    oracle: tuple[float, float]
    budget: float
    at_budget: Mapping[str, float]  # share of the top tier's quality at `budget` of its cost


def tier_report(
    p: F64, score: F64, models: Sequence[str], prices: Sequence[float], budget: float = 0.4
) -> TierReport:
    """The N-tier policy's quality-vs-cost sweep beside the best two-tier policy, random and oracle.

    Costs are shares of "the most expensive tier answers everything"; qualities mean scores. Tiers
    must be ordered cheap -> expensive, the last being the reference."""
    price = np.asarray(prices, dtype=np.float64)
    if np.any(np.diff(price) <= 0):
        raise ValueError(f"tiers must be ordered by strictly increasing price, got {list(prices)}")
    n, tiers = score.shape
    top = price[-1] * n
    rows = np.arange(n)

    def point(assign: npt.NDArray[np.int64]) -> tuple[float, float]:
        return float(price[assign].sum() / top), float(score[rows, assign].mean())

    single = {m: point(np.full(n, t, dtype=np.int64)) for t, m in enumerate(models)}
    policy = tuple(
        (float(tol), *point(tier_policy(p, price, float(tol)))) for tol in np.linspace(0.0, 1.0, 201)
    )
    two: dict[str, tuple[tuple[float, float], ...]] = {}
    for i in range(tiers):
        for j in range(i + 1, tiers):
            order = np.argsort(-(p[:, j] - p[:, i]), kind="stable")
            pts = []
            for share in np.linspace(0.0, 1.0, 101):
                assign = np.full(n, i, dtype=np.int64)
                assign[order[: int(round(share * n))]] = j
                pts.append(point(assign))
            two[f"{models[i]}>{models[j]}"] = tuple(pts)
    best = score.max(axis=1, keepdims=True)
    oracle_assign = np.argmin(np.where(score >= best, price[None, :], np.inf), axis=1).astype(np.int64)
    oracle = point(oracle_assign)
    ref = single[models[-1]][1]
    at = {
        f"{tiers}-tier policy": _interp_at([(c, q) for _, c, q in policy], budget) / ref,
        "best two-tier policy": max(_interp_at(list(v), budget) for v in two.values()) / ref,
        "random (mix of single tiers)": _interp_at(list(single.values()), budget) / ref,
        "oracle": _interp_at([oracle, *single.values()], budget) / ref,
    }
    return TierReport(
        models=tuple(models),
        prices=tuple(float(x) for x in prices),
        single=single,
        policy=policy,
        two_tier=two,
        oracle=oracle,
        budget=budget,
        at_budget=at,
    )


def plot_tiers(report: TierReport, path: str | Path) -> Path:
    from eval.routing.metrics import CostQuality
    from eval.routing.plot import plot_cost_quality

    curves: dict[str, Sequence[tuple[float, float]]] = {
        f"{len(report.models)}-tier policy (tolerance sweep)": [(c, q) for _, c, q in report.policy]
    }
    best_pair = max(report.two_tier, key=lambda k: _interp_at(list(report.two_tier[k]), report.budget))
    curves[f"best two-tier: {best_pair}"] = list(report.two_tier[best_pair])
    curves["random (mix of single tiers)"] = sorted(report.single.values())
    marks = {m: CostQuality(quality=q, cost_usd=c, tier_share=()) for m, (c, q) in report.single.items()}
    marks["oracle"] = CostQuality(quality=report.oracle[1], cost_usd=report.oracle[0], tier_share=())
    return plot_cost_quality(
        curves,
        path,
        marks,
        title=f"{len(report.models)} tiers: quality vs cost",
        cost_label=f"cost relative to {report.models[-1]} only",
    )


def median_call_us(
    scorers: Mapping[str, Any], emb: F32, texts: Sequence[str], rows: int = 200, rounds: int = 5
) -> dict[str, float]:
    """Median wall time (microseconds) of each scorer on one request (a (1, d) row and its text), over
    `rows` prompts x `rounds`: the per-request cost a serving thread pays after the encoder. The
    scorers take turns on every row, so machine load weighs on all of them alike."""
    import time

    times: dict[str, list[float]] = {name: [] for name in scorers}
    for _ in range(rounds):
        for i in range(min(rows, emb.shape[0])):
            for name, score_one in scorers.items():
                start = time.perf_counter()
                score_one(emb[i : i + 1], texts[i : i + 1])
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t) * 1e6) for name, t in times.items()}
