from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eval.routing.data import (
    RoutingDataError,
    Row,
    common_models,
    kfold_indices,
    load_rows,
    pair_outcomes,
    rows_with_models,
    split_train_dev,
    tier_outcomes,
)


def make_row(
    i: int, task: str = "t/a", strong: float = 1.0, weak: float = 0.0, cost: Any = None
) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "source": "test",
        "task": task,
        "prompt": f"question {i}",
        "outcomes": {
            "S": {"score": strong, "cost_usd": cost, "response": None},
            "W": {"score": weak, "cost_usd": cost, "response": "x"},
        },
    }


WriteFile = Callable[..., Path]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    def _write(lines: list[Any], name: str = "d.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
        return path

    return _write


def test_loads_rows_from_several_files(write: WriteFile) -> None:
    a = write([make_row(1), "", make_row(2, task="t/b")], "a.jsonl")
    b = write([make_row(3, cost=0.5)], "b.jsonl")
    rows = load_rows([a, b])
    assert [r.id for r in rows] == ["r1", "r2", "r3"]
    assert rows[1].task == "t/b" and rows[0].outcomes["W"].response == "x"
    assert rows[2].outcomes["S"].cost_usd == 0.5
    with pytest.raises(AttributeError):
        rows[0].id = "changed"  # type: ignore[misc]


def _broken(**changes: Any) -> dict[str, Any]:
    row = make_row(1)
    for key, value in changes.items():
        if key == "score":
            row["outcomes"]["S"]["score"] = value
        elif key == "cost":
            row["outcomes"]["S"]["cost_usd"] = value
        elif value is None:
            del row[key]
        else:
            row[key] = value
    return row


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (_broken(id=None), "'id' must be a string"),
        (_broken(prompt=3), "'prompt' must be a string"),
        (_broken(outcomes={}), "non-empty object"),
        (_broken(score=1.5), r"score must be a number in \[0, 1\]"),
        (_broken(score=True), "score must be a number"),
        (_broken(score="1"), "score must be a number"),
        (_broken(cost=-0.1), "cost_usd must be null or a number >= 0"),
    ],
)
def test_validation_errors_name_file_and_line(write: WriteFile, line: Any, match: str) -> None:
    path = write([make_row(0), line])
    with pytest.raises(RoutingDataError, match=match) as info:
        load_rows(path)
    assert str(info.value).startswith(f"{path}:2:")


def test_duplicate_ids_empty_and_missing_files(write: WriteFile, tmp_path: Path) -> None:
    a = write([make_row(1)], "a.jsonl")
    b = write([make_row(1)], "b.jsonl")
    with pytest.raises(RoutingDataError, match=f"duplicate id 'r1' \\(first seen at {a}:1\\)"):
        load_rows([a, b])
    with pytest.raises(RoutingDataError, match="no rows"):
        load_rows(write([""], "empty.jsonl"))
    with pytest.raises(RoutingDataError, match="cannot read"):
        load_rows(tmp_path / "absent.jsonl")


def test_pair_and_tier_outcomes(write: WriteFile) -> None:
    rows = load_rows(write([make_row(1, strong=1.0, weak=0.0), make_row(2, strong=0.0, weak=1.0)]))
    pair = pair_outcomes(rows, "S", "W")
    np.testing.assert_array_equal(pair.needs_strong, [True, False])
    assert pair.strong_cost is None  # null costs are not silently zero
    priced = load_rows(write([make_row(1, cost=0.25)], "p.jsonl"))
    assert pair_outcomes(priced, "S", "W").strong_cost == pytest.approx([0.25])
    tiers = tier_outcomes(rows, ["W", "S"])
    assert tiers.score.shape == (2, 2) and tiers.cost is None
    with pytest.raises(RoutingDataError, match="no outcome for model 'X'"):
        tier_outcomes(rows, ["W", "X"])
    with pytest.raises(RoutingDataError, match="same"):
        pair_outcomes(rows, "S", "S")


def test_rows_with_models_reports_what_it_drops(write: WriteFile) -> None:
    partial = make_row(2)
    del partial["outcomes"]["S"]
    rows = load_rows(write([make_row(1), partial]))
    assert common_models(rows) == ("W",)
    kept, dropped = rows_with_models(rows, ["S", "W"])
    assert [r.id for r in kept] == ["r1"] and dropped == 1


def _rows(n: int, tasks: int = 7) -> tuple[Row, ...]:
    return tuple(
        Row(id=f"id-{i}", source="s", task=f"task{i % tasks}", prompt="p", outcomes={}) for i in range(n)
    )


def test_train_dev_split_is_deterministic_disjoint_and_stable() -> None:
    rows = _rows(2000)
    train, dev = split_train_dev(rows, 0.2)
    assert (train, dev) == split_train_dev(rows, 0.2)
    ids_train, ids_dev = {r.id for r in train}, {r.id for r in dev}
    assert not ids_train & ids_dev and len(ids_train | ids_dev) == 2000
    assert 0.17 < len(dev) / 2000 < 0.23
    # Adding rows never moves existing ones; a different salt gives a different split.
    _, dev_more = split_train_dev(_rows(3000), 0.2)
    assert ids_dev <= {r.id for r in dev_more}
    assert {r.id for r in split_train_dev(rows, 0.2, salt="other")[1]} != ids_dev
    with pytest.raises(ValueError):
        split_train_dev(rows, 1.0)


def test_kfold_covers_every_row_once() -> None:
    rows = _rows(500)
    folds = kfold_indices(rows, 5)
    assert len(folds) == 5
    tests = np.concatenate([t for _, t in folds])
    assert sorted(tests.tolist()) == list(range(500))
    for train, test in folds:
        assert not set(train.tolist()) & set(test.tolist())
        assert len(train) + len(test) == 500 and len(test) > 50
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, kfold_indices(rows, 5), strict=True))
    with pytest.raises(ValueError):
        kfold_indices(rows, 1)


def test_grouped_kfold_keeps_each_task_in_one_fold() -> None:
    rows = _rows(300, tasks=12)
    for train, test in kfold_indices(rows, 3, group_by_task=True):
        train_tasks = {rows[i].task for i in train}
        test_tasks = {rows[i].task for i in test}
        assert not train_tasks & test_tasks
