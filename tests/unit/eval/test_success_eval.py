"""Training and evaluating the success predictor: real small fits on synthetic data, the data rules."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from eval.routing.data import Outcome, Row
from eval.routing.metrics import apgr, routing_curve
from eval.routing.success_eval import SOURCES, gain_score, make_fold, resolve, tier_policy, tier_report
from eval.routing.success_train import (
    OutcomeTable,
    SuccessConfig,
    build_table,
    canonical_names,
    fit_table,
    overlap_mask,
    pair_weights,
    source_of,
)

D = 12


def _synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit embeddings, true success probabilities of 4 models under a 2-factor IRT, sampled 0/1 outcomes.

    Model 0 is weak everywhere, model 3 strong everywhere; models 1 and 2 are each good on one half of
    the space (the first embedding axis), which only a prompt-dependent model can tell apart."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, D))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    axis = emb[:, 0] * 6.0
    logits = np.stack([-1.0 + 0 * axis, axis, -axis, 2.0 + 0.5 * axis], axis=1)
    p = 1 / (1 + np.exp(-logits))
    return emb.astype(np.float32), p, (rng.random(p.shape) < p).astype(np.float64)


def _table(emb: np.ndarray, score: np.ndarray, sources: list[str] | None = None) -> OutcomeTable:
    n = emb.shape[0]
    return OutcomeTable(
        texts=tuple(f"t{i}" for i in range(n)),
        prompts=tuple(f"p{i}" for i in range(n)),
        sources=tuple(sources or ["s"] * n),
        models=("m0", "m1", "m2", "m3"),
        score=score,
        emb=emb,
    )


CFG = SuccessConfig(pca_rank=D, latent=4, l2=1e-4, steps=300, learning_rate=0.05)


def test_fit_recovers_prompt_dependent_success_on_held_out_prompts() -> None:
    emb, _, y = _synthetic(3000, seed=0)
    test_emb, test_p, test_y = _synthetic(1000, seed=1)
    # A third of the pairs are missing, as when files list different models.
    mask = np.random.default_rng(2).random(y.shape) < 0.33
    model, fit = fit_table(_table(emb, np.where(mask, np.nan, y)), CFG)
    assert fit.pairs == int((~mask).sum())
    pred = model.predict(test_emb, [""] * len(test_emb))
    # Close to the true probabilities: the constant model's base rate, the prompt-dependent models'
    # variation (the two crossing models included) ...
    assert abs(float(pred[:, 0].mean()) - 1 / (1 + np.e)) < 0.05 and float(pred[:, 0].std()) < 0.1
    for j in (1, 2, 3):
        assert np.corrcoef(pred[:, j], test_p[:, j])[0, 1] > 0.9, j

    # ... and a better log loss than each model's constant base rate.
    def logloss(q: np.ndarray) -> float:
        q = np.clip(q, 1e-6, 1 - 1e-6)
        return float(-(test_y * np.log(q) + (1 - test_y) * np.log(1 - q)).mean())

    assert logloss(pred) < logloss(np.broadcast_to(y.mean(axis=0), test_y.shape)) - 0.1
    # Routing m1 (weak) -> m2 (strong) by the predicted gain orders prompts by the hidden axis.
    score = gain_score(model, test_emb, [""] * len(test_emb), "m2", "m1")
    assert apgr(routing_curve(score, test_y[:, 2], test_y[:, 1])) > 0.8


def test_fit_is_deterministic_per_seed_and_seeds_differ() -> None:
    emb, _, y = _synthetic(500, seed=3)
    a, _ = fit_table(_table(emb, y), CFG)
    b, _ = fit_table(_table(emb, y), CFG)
    c, _ = fit_table(_table(emb, y), replace(CFG, seed=7))
    np.testing.assert_array_equal(a.loadings, b.loadings)
    assert not np.array_equal(a.loadings, c.loadings)


def test_pair_weights_balance_sources_by_their_pair_counts() -> None:
    score = np.array([[1, 0, np.nan, np.nan]] * 3 + [[1, 1, 1, 0]] * 1, dtype=np.float64)
    table = _table(np.zeros((4, D), np.float32), score, ["big", "big", "big", "small"])
    even = pair_weights(table, balance=0.0)  # each source weighs the same in total
    assert np.isclose(even[:3].sum(), even[3:].sum())
    flat = pair_weights(table, balance=1.0)  # every observed pair the same
    assert np.allclose(flat[~np.isnan(score)], 1.0)
    assert np.all(even[np.isnan(score)] == 0) and np.isclose(even.sum(), (~np.isnan(score)).sum())


def _row(i: str, prompt: str, outcomes: dict[str, float], source: str = "x") -> Row:
    return Row(
        id=i,
        source=source,
        task="t",
        prompt=prompt,
        outcomes={m: Outcome(score=s, cost_usd=None, response=None) for m, s in outcomes.items()},
    )


def test_case_variants_of_a_model_name_share_one_column_and_repeated_prompts_merge() -> None:
    a = [
        _row("a1", "same prompt", {"Mixtral-8x7B": 1.0, "gpt": 1.0}),
        _row("a2", "other", {"Mixtral-8x7B": 0.0}),
    ]
    b = [_row("b1", "same prompt", {"mixtral-8x7b": 0.0, "llama": 1.0})]
    assert canonical_names([*a, *b])["mixtral-8x7b"] == "Mixtral-8x7B"  # the more frequent spelling
    table, _ = build_table([("A", a), ("B", b)])
    assert table.models == ("Mixtral-8x7B", "gpt", "llama")
    assert table.prompts == ("same prompt", "other")
    # The first file's outcome wins for a model both files have; the second adds its other models.
    np.testing.assert_array_equal(table.score[0], [1.0, 1.0, 1.0])
    assert np.isnan(table.score[1, 1]) and table.sources == ("A", "A")


def test_overlap_mask_catches_verbatim_and_shared_13_gram_prompts() -> None:
    held = ["The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat today."]
    prompts = [
        "the QUICK brown fox, jumps over the lazy dog while the cat sleeps on the warm mat today",
        "Options: A. x B. y. The quick brown fox jumps over the lazy dog while the cat sleeps on the rug",
        "The quick brown fox jumps over the lazy dog while a cat",
    ]
    assert overlap_mask(prompts, held).tolist() == [True, True, False]


def test_source_of_groups_splits_of_one_benchmark() -> None:
    assert source_of("/d/mmlu_train.jsonl") == source_of("mmlu_dev.jsonl") == "mmlu"
    assert source_of("mmlupro_dev.jsonl") == "mmlupro"
    assert source_of("zeroeval_math_l5.jsonl") == "math-l5"
    assert source_of("routerbench_mbpp_train.jsonl") == "routerbench-mbpp"
    assert {s.name for s in SOURCES} == {
        "mmlu",
        "mmlupro",
        "crux",
        "math-l5",
        "routerbench-arc_challenge",
        "routerbench-mbpp",
        "routerbench-winograde",
    }


def test_holding_out_mmlu_drops_ori_mmlu_rows_and_overlaps_from_every_other_source() -> None:
    q = "what is the capital city of france given that paris is a large city in europe and well known"
    loaded: dict[str, tuple[Row, ...]] = {
        s.name: (_row(f"{s.name}-1", f"{s.name} unique prompt", {s.strong: 1.0, s.weak: 0.0}),)
        for s in SOURCES
    }
    loaded["mmlu"] = (_row("m1", q, {"gpt-4-1106-preview": 1.0, "mixtral-8x7b-instruct-v0.1": 0.0}),)
    loaded["mmlupro"] = (
        _row("p1", "unrelated physics question", {"gpt-4o-2024-05-13": 1.0}, source="MMLU-Pro:ori_mmlu"),
        _row("p2", "unrelated stemez question", {"gpt-4o-2024-05-13": 1.0}, source="MMLU-Pro:stemez"),
    )
    loaded["crux"] = (_row("c1", q + " extra", {"gpt-4o-2024-05-13": 1.0}),)
    fold = make_fold(SOURCES[0], loaded)
    kept = {r.id for _, rows in fold.train for r in rows}
    assert "p1" not in kept and "p2" in kept and "c1" not in kept
    assert fold.dropped == {"ori_mmlu": 1, "overlap": 1}
    assert [r.id for r in fold.eval_rows] == ["m1"]
    # Holding out another source keeps the ori_mmlu rows.
    assert "p1" in {r.id for _, rows in make_fold(SOURCES[2], loaded).train for r in rows}


def test_resolve_rules_in_order() -> None:
    trained = ["gpt-4o-2024-05-13", "Mixtral-8x7B-Instruct-v0.1", "Meta-Llama-3.1-8B-Instruct"]
    assert resolve("gpt-4o-2024-05-13", trained) == ("gpt-4o-2024-05-13", "exact")
    assert resolve("mixtral-8x7b-instruct-v0.1", trained)[1] == "case-insensitive name"
    assert resolve("my-pool", trained, {"my-pool": "Meta-Llama-3.1-8B-Instruct"}) == (
        "Meta-Llama-3.1-8B-Instruct",
        "declared like",
    )
    assert resolve("gpt-4o-2024-08-06", trained) == ("gpt-4o-2024-05-13", "nearest name")
    with pytest.raises(KeyError):
        resolve("zzz", trained)
    with pytest.raises(KeyError):
        resolve("my-pool", trained, {"my-pool": "not-trained"})


def test_tier_policy_picks_the_cheapest_tier_within_tolerance_of_the_best() -> None:
    p = np.array([[0.80, 0.85, 0.90], [0.20, 0.50, 0.90], [0.70, 0.60, 0.65]])
    prices = np.array([1.0, 3.0, 10.0])
    assert tier_policy(p, prices, 0.0).tolist() == [2, 2, 0]
    assert tier_policy(p, prices, 0.1).tolist() == [0, 2, 0]
    assert tier_policy(p, prices, 0.45).tolist() == [0, 1, 0]
    assert tier_policy(p, prices, 1.0).tolist() == [0, 0, 0]


def test_tier_report_with_perfect_predictions_reaches_the_oracle() -> None:
    rng = np.random.default_rng(5)
    score = (rng.random((400, 3)) < [0.4, 0.6, 0.8]).astype(np.float64)
    report = tier_report(score, score, ["cheap", "mid", "top"], [1.0, 3.0, 10.0], budget=0.4)
    # Tolerance 0 on the true outcomes is the oracle: the cheapest tier that gets the row right.
    assert (report.policy[0][1], report.policy[0][2]) == pytest.approx(report.oracle)
    assert report.single["top"] == pytest.approx((1.0, score[:, 2].mean()))
    at = report.at_budget
    assert at["oracle"] >= at["3-tier policy"] >= at["random (mix of single tiers)"]
    # Random mixing of single tiers is the hull through (cost, quality) of the single-tier points.
    mid, top = report.single["mid"], report.single["top"]
    expected = mid[1] + (0.4 - mid[0]) / (top[0] - mid[0]) * (top[1] - mid[1])
    assert at["random (mix of single tiers)"] * top[1] == pytest.approx(expected)


def test_tier_report_refuses_tiers_not_ordered_by_price() -> None:
    with pytest.raises(ValueError, match="increasing price"):
        tier_report(np.zeros((2, 2)), np.zeros((2, 2)), ["a", "b"], [2.0, 1.0])


def test_source_offsets_keep_a_benchmark_level_out_of_the_abilities() -> None:
    """Models A and B are equally able, but A is only seen on an easy source and B only on a hard
    one; model C, seen on both, ties the sources' levels together. With offsets the predictor must
    call A and B alike; without, it credits A with the easy source's level."""
    rng = np.random.default_rng(11)
    n = 2000
    emb = rng.normal(size=(n, D)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    hard = np.arange(n) >= n // 2
    level = np.where(hard, -2.0, 2.0)
    y = (rng.random((n, 3)) < 1 / (1 + np.exp(-level[:, None]))).astype(np.float64)
    score = y.copy()
    score[hard, 0] = np.nan  # A: easy source only
    score[~hard, 1] = np.nan  # B: hard source only
    table = _table(emb, score[:, [0, 1, 2, 2]], ["hard" if h else "easy" for h in hard])
    table = replace(table, models=("A", "B", "C", "C2"))
    probe = emb[:200]
    with_offsets, _ = fit_table(table, replace(CFG, source_offsets=True, steps=400))
    without, _ = fit_table(table, CFG)
    p_with = with_offsets.predict(probe, [""] * 200).mean(axis=0)
    p_without = without.predict(probe, [""] * 200).mean(axis=0)
    assert abs(p_with[0] - p_with[1]) < 0.1
    assert p_without[0] - p_without[1] > 0.5
