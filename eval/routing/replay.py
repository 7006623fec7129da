"""`llmgw router replay`: a deployment simulated on a routing file, learning from its own traffic.

Prompts arrive in file order (or shuffled by a seed). Each is routed with the outcome memory as it is at
that moment: difficulty = `router.memory.blend(prior, memory.neighbourhood(embedding))`, strong when it
reaches the live `target_share` quantile of the difficulties routed so far (the prior's training-mix
threshold for the first few rows). At `explore_rate` a cheap-routed request is also
"sent" to the strong tier: a judge decides whether the cheap answer was good enough, the outcome goes
into the memory and the pair into the live estimate (`router.estimate`). The memory, judge and estimate
are the same code the gateway runs; only the answers come from the file.

Judges: `recorded` reads the file's scores (needs_strong = weak < strong; the estimate sees both
scores), `agreement` compares the recorded final answers (`router.judge.AgreementJudge`; rows without a
comparable final answer give no label). Cost is USD when both models carry per-row prices, else strong
calls (strong = 1, weak = 0). Exploration calls are strong calls the gateway pays for.

Figures: `apgr` is RouteLLM's APGR of the difficulties as routed over the rows that arrived after
`warmup` labels, beside `apgr_prior` (the prior alone on the same rows); the learning `curve` freezes the
memory when it reaches each label count and scores every row still to arrive, so its points are on
unseen traffic (not on the memory's own labels, nor only on the never-explored strong-routed rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eval.routing.data import FloatArray, Row, costs, has_costs, rows_with_models, scores
from eval.routing.embed_cache import DEFAULT_CACHE_DIR, embed_texts
from eval.routing.metrics import apgr, cpt, routing_curve
from eval.routing.train import row_texts
from router.difficulty import DifficultyModel
from router.estimate import ExploreSample, estimate
from router.judge import AgreementJudge
from router.memory import BlendParams, OutcomeMemory, blend

__all__ = ["CHECKPOINTS", "ReplayConfig", "ReplayData", "prepare", "replay"]

JudgeKind = Literal["recorded", "agreement"]
CHECKPOINTS: tuple[int, ...] = (0, 25, 50, 100, 200, 300, 500, 1000, 2000)
_CALIBRATE_AFTER = 20


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    explore_rate: float = 0.05
    judge: JudgeKind = "recorded"
    warmup: int = 0
    seed: int | None = None
    k: int = 64
    blend_c: float = 128.0
    blend_scale: Literal["prior", "probability"] = "prior"
    target_share: float = 0.3
    capacity: int = 50_000


@dataclass(frozen=True, slots=True)
class ReplayData:
    """One file's rows as the replay needs them (in file order)."""

    ids: list[str]
    prompts: list[str]
    emb: np.ndarray
    prior: FloatArray
    strong: FloatArray
    weak: FloatArray
    strong_cost: FloatArray
    weak_cost: FloatArray
    strong_text: list[str | None]
    weak_text: list[str | None]


def prepare(
    rows: Sequence[Row],
    model: DifficultyModel,
    strong: str,
    weak: str,
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
) -> ReplayData:
    kept, _ = rows_with_models(rows, (strong, weak))
    if not kept:
        raise ValueError(f"no row has outcomes for both {strong!r} and {weak!r}")
    texts = row_texts(kept)
    emb = embed_texts(model.encoder, texts, model.max_tokens, cache_dir)
    prior = np.asarray(model.artifact.head.difficulty(emb, texts), dtype=np.float64)
    priced = has_costs(kept, strong) and has_costs(kept, weak)
    return ReplayData(
        ids=[r.id for r in kept],
        prompts=[r.prompt for r in kept],
        emb=emb,
        prior=prior,
        strong=scores(kept, strong),
        weak=scores(kept, weak),
        strong_cost=costs(kept, strong) if priced else np.ones(len(kept)),
        weak_cost=costs(kept, weak) if priced else np.zeros(len(kept)),
        strong_text=[r.outcomes[strong].response for r in kept],
        weak_text=[r.outcomes[weak].response for r in kept],
    )


def _judged(data: ReplayData, i: int, judge: JudgeKind) -> tuple[float, ExploreSample] | None:
    """(needs_strong, estimate sample) of row i, or None when the judge cannot tell."""
    if judge == "recorded":
        sample = ExploreSample(data.weak[i], data.strong[i], data.weak_cost[i], data.strong_cost[i])
        return float(data.weak[i] < data.strong[i]), sample
    cheap, strong = data.weak_text[i], data.strong_text[i]
    if cheap is None or strong is None:
        raise ValueError("--judge agreement needs recorded responses; this file has none")
    v = AgreementJudge().verdict(data.prompts[i], cheap, strong)
    if v is None:
        return None
    return 1.0 - v, ExploreSample(v, 1.0, data.weak_cost[i], data.strong_cost[i])


def _apgr(d: FloatArray, data: ReplayData, idx: np.ndarray) -> float:
    if idx.size < 2:
        return math.nan
    return apgr(routing_curve(d, data.strong[idx], data.weak[idx]))


def _frozen_point(
    memory: OutcomeMemory, data: ReplayData, unseen: np.ndarray, params: BlendParams
) -> dict[str, Any]:
    d = np.array([blend(data.prior[i], memory.neighbourhood(data.emb[i]), params) for i in unseen])
    return {
        "labels": len(memory),
        "rows": int(unseen.size),
        "apgr": _apgr(d, data, unseen),
        "apgr_prior": _apgr(data.prior[unseen], data, unseen),
    }


def replay(
    data: ReplayData,
    cfg: ReplayConfig,
    threshold: float,
    seeds_memory: Sequence[ReplayData] = (),
    rows: int | None = None,
) -> tuple[dict[str, Any], FloatArray, list[str]]:
    """(report, difficulty as routed, ids) in arrival order."""
    rng = np.random.default_rng(cfg.seed if cfg.seed is not None else 0)
    order = rng.permutation(len(data.ids)) if cfg.seed is not None else np.arange(len(data.ids))
    if rows is not None:
        order = order[:rows]
    memory = OutcomeMemory(data.emb.shape[1], cfg.capacity, cfg.k)
    params = BlendParams(cfg.blend_c, cfg.blend_scale)
    for other in seeds_memory:
        for i in range(len(other.ids)):
            judged = _judged(other, i, cfg.judge)
            if judged is not None:
                memory.add(other.emb[i], judged[0])
    seeded = len(memory)
    routed = np.empty(order.size, dtype=np.float64)
    to_strong = np.zeros(order.size, dtype=bool)
    explored = np.zeros(len(data.ids), dtype=bool)
    samples: list[ExploreSample] = []
    explore_cost = 0.0
    after_warmup = order.size
    curve: list[dict[str, Any]] = []
    marks = [c for c in CHECKPOINTS if c > 0]
    curve.append(_frozen_point(memory, data, order, params))
    for pos, i in enumerate(order):
        if after_warmup == order.size and len(memory) - seeded >= cfg.warmup:
            after_warmup = pos
        d = blend(data.prior[i], memory.neighbourhood(data.emb[i]), params)
        # Live calibration: the cut follows the target share on the difficulties seen so far (the
        # training-mix threshold routes a file of another domain almost all one way).
        cut = (
            threshold if pos < _CALIBRATE_AFTER else float(np.quantile(routed[:pos], 1.0 - cfg.target_share))
        )
        routed[pos], to_strong[pos] = d, d >= cut
        if to_strong[pos] or rng.random() >= cfg.explore_rate:
            continue
        explore_cost += data.strong_cost[i]
        explored[i] = True  # a strong call made, whether or not the judge can tell
        judged = _judged(data, i, cfg.judge)
        if judged is None:
            continue
        memory.add(data.emb[i], judged[0])
        samples.append(judged[1])
        if marks and len(memory) - seeded == marks[0]:
            marks.pop(0)
            curve.append(_frozen_point(memory, data, order[pos + 1 :], params))
    tail = order[after_warmup:]
    d_tail = routed[after_warmup:]
    s, w = data.strong[order], data.weak[order]
    strong_share = float(to_strong.mean())
    true_share = float(np.where(to_strong, s, w).sum() / s.sum()) if s.sum() > 0 else math.nan
    est = estimate(samples, strong_share, explore_rate=cfg.explore_rate)
    sc, wc = data.strong_cost[order], data.weak_cost[order]
    explore_share = explore_cost / float(sc.sum()) if sc.sum() > 0 else math.nan
    tail_curve = routing_curve(d_tail, data.strong[tail], data.weak[tail]) if tail.size >= 2 else None
    calls = float(np.sum(~to_strong & explored[order])) / order.size
    report: dict[str, Any] = {
        "rows": int(order.size),
        "seed": cfg.seed,
        "judge": cfg.judge,
        "explore_rate": cfg.explore_rate,
        "warmup": cfg.warmup,
        "rows_after_warmup": int(tail.size),
        "memory_seeded": seeded,
        "k": cfg.k,
        "blend_c": cfg.blend_c,
        "blend_scale": cfg.blend_scale,
        "apgr_prior": _apgr(data.prior[tail], data, tail),
        "apgr": _apgr(d_tail, data, tail),
        # Exploration calls are strong calls too: they are added to the share needed.
        "cpt50": cpt(tail_curve, 0.5) + calls if tail_curve else math.nan,
        "cpt80": cpt(tail_curve, 0.8) + calls if tail_curve else math.nan,
        "labels": len(memory) - seeded,
        "explore_cost_share": explore_share,
        "strong_share": strong_share,
        "cost_share_true": float((np.where(to_strong, sc, wc).sum() + explore_cost) / sc.sum()),
        "cost_share_estimate": est.cost_share if est else math.nan,
        "quality_share_estimate": est.quality_share if est else math.nan,
        "quality_share_ci90": [est.ci90_low, est.ci90_high] if est else [math.nan, math.nan],
        "quality_share_true": true_share,
        "curve": curve,
    }
    return report, routed, [data.ids[i] for i in order]
