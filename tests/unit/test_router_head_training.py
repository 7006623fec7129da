"""Training the head with extra files scored by their own strong/weak pair (`--pair-data`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest

from eval.routing.data import Outcome, Row
from eval.routing.train import TrainConfig, fit_head, oof_predictions, prepare
from router.encoder import Encoder

DIM = 8
CFG = TrainConfig(strong="s1", weak="w1", ks=(3, 5), rank=4, folds=2)


@dataclass(frozen=True)
class _Identity:
    model_sha256: str = "fake-encoder"
    dim: int = DIM


class _FakeEncoder:
    """A deterministic text -> unit vector map with the calls embed_texts makes."""

    identity = _Identity()

    def token_ids(self, text: str, max_tokens: int) -> list[int]:
        return list(hashlib.sha256(text.encode()).digest()[:DIM])

    def embed_ids(self, batch: Sequence[Sequence[int]]) -> Any:
        x = np.asarray(batch, dtype=np.float32) - 127.5
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def _row(i: int, prompt: str, task: str, scores: dict[str, float]) -> Row:
    return Row(
        id=f"{task}-{i}",
        source="test",
        task=task,
        prompt=prompt,
        outcomes={m: Outcome(score=s, cost_usd=None, response=None) for m, s in scores.items()},
    )


def _primary(n: int, tasks: int = 3) -> list[Row]:
    return [
        _row(i, f"primary question {i}", f"t{i % tasks}", {"s1": 1.0, "w1": float(i % 2)}) for i in range(n)
    ]


def _extra(n: int) -> list[Row]:
    # Scored with another pair; the primary pair is absent, so these rows only count with their own.
    return [_row(i, f"extra question {i}", "other", {"s2": 1.0, "w2": 0.0}) for i in range(n)]


def test_extra_rows_use_their_own_pair_and_come_after_the_primary_rows() -> None:
    ts = prepare(
        _primary(20), CFG, cast(Encoder, _FakeEncoder()), cache_dir=None, extra=[(_extra(6), "s2", "w2")]
    )
    assert ts.primary == 20
    assert len(ts.rows) == 26
    assert [r.task for r in ts.rows[20:]] == ["other"] * 6
    np.testing.assert_array_equal(ts.gain[20:], np.ones(6))
    np.testing.assert_array_equal(ts.gain[:20], 1.0 - (np.arange(20) % 2))


def test_a_prompt_repeated_or_excluded_across_files_is_dropped_once() -> None:
    primary = _primary(20)
    extra = [*_extra(4), _row(99, primary[3].prompt, "other", {"s2": 1.0, "w2": 0.0})]
    excluded = [_row(0, "extra question 1", "dev", {})]
    ts = prepare(
        primary, CFG, cast(Encoder, _FakeEncoder()), excluded, cache_dir=None, extra=[(extra, "s2", "w2")]
    )
    assert len(ts.rows) == 20 + 3
    assert ts.dropped == {"missing_pair": 0, "duplicate_prompt": 1, "excluded_prompt": 1}


def test_extra_rows_train_every_fold_but_are_never_scored_by_cv() -> None:
    # One primary task: with the extra file's task there would be two (= folds), enough for task-CV
    # if extra rows counted; they must not, since the task-CV figure is about the primary data.
    ts = prepare(
        _primary(30, tasks=1),
        CFG,
        cast(Encoder, _FakeEncoder()),
        cache_dir=None,
        extra=[(_extra(10), "s2", "w2")],
    )
    preds, tests = oof_predictions(ts, CFG, group_by_task=False)
    assert preds.shape == (30, 3)
    tested = np.sort(np.concatenate(tests))
    np.testing.assert_array_equal(tested, np.arange(30))
    head, cv = fit_head(ts, CFG)
    knn = head.components[0]
    assert knn.params()["rows"] == 40  # the final kNN holds the extra rows too
    assert len(cv["id"]["folds"]) == 2
    assert "task" not in cv


def test_an_extra_file_without_its_pair_is_an_error_not_a_silent_no_op() -> None:
    with pytest.raises(ValueError, match="'s2'/'w-typo'"):
        prepare(
            _primary(20),
            CFG,
            cast(Encoder, _FakeEncoder()),
            cache_dir=None,
            extra=[(_extra(6), "s2", "w-typo")],
        )
