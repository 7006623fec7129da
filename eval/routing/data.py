"""Routing outcome data: loading, validation, outcome arrays and deterministic splits.

Format (shared/data/routing/README.md): one JSON object per line,
`{"id", "source", "task", "prompt", "outcomes": {MODEL: {"score", "cost_usd", "response"}}}`.
Rows load into frozen dataclasses; any malformed line fails the whole load with `file:line: reason`
so a bad dataset never yields a silently smaller evaluation.

Splits are keyed by a BLAKE2b hash of the row id (plus a salt), never by file order or a random
generator: the same id lands in the same split on every machine, run and Python version, and adding rows
does not move existing ones. That is what the cascade's "cross-validated, not fitted to the evaluation
rows" needs: thresholds fitted on folds != k are evaluated on fold k, and every row is evaluated once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class RoutingDataError(ValueError):
    """A routing file or row that does not match the documented format."""


@dataclass(frozen=True, slots=True)
class Outcome:
    score: float
    cost_usd: float | None
    response: str | None


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    source: str
    task: str
    prompt: str
    outcomes: Mapping[str, Outcome]


def _require_str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise RoutingDataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def _number(value: Any) -> float | None:
    # bool is an int subclass; a `true` score is a data bug, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _parse_outcome(model: str, raw: Any, where: str) -> Outcome:
    if not isinstance(raw, dict):
        raise RoutingDataError(f"{where}: outcome for {model!r} must be an object")
    score = _number(raw.get("score"))
    if score is None or not 0.0 <= score <= 1.0:
        raise RoutingDataError(
            f"{where}: {model!r} score must be a number in [0, 1], got {raw.get('score')!r}"
        )
    cost_raw = raw.get("cost_usd")
    cost = _number(cost_raw)
    if cost_raw is not None and (cost is None or cost < 0.0):
        raise RoutingDataError(f"{where}: {model!r} cost_usd must be null or a number >= 0, got {cost_raw!r}")
    response = raw.get("response")
    if response is not None and not isinstance(response, str):
        raise RoutingDataError(f"{where}: {model!r} response must be null or a string")
    return Outcome(score=score, cost_usd=cost, response=response)


def parse_row(obj: Any, where: str) -> Row:
    """Validate one decoded JSON value; `where` (e.g. `file:line`) prefixes every error."""
    if not isinstance(obj, dict):
        raise RoutingDataError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
    row_id = _require_str(obj, "id", where)
    if not row_id:
        raise RoutingDataError(f"{where}: field 'id' must not be empty")
    outcomes_raw = obj.get("outcomes")
    if not isinstance(outcomes_raw, dict) or not outcomes_raw:
        raise RoutingDataError(f"{where}: field 'outcomes' must be a non-empty object of MODEL -> outcome")
    outcomes = {str(m): _parse_outcome(str(m), o, where) for m, o in outcomes_raw.items()}
    return Row(
        id=row_id,
        source=_require_str(obj, "source", where),
        task=_require_str(obj, "task", where),
        prompt=_require_str(obj, "prompt", where),
        outcomes=outcomes,
    )


def load_rows(paths: str | Path | Sequence[str | Path]) -> tuple[Row, ...]:
    """Load one or more routing files in order; ids must be unique across all of them."""
    path_list = [paths] if isinstance(paths, str | Path) else list(paths)
    rows: list[Row] = []
    seen: dict[str, str] = {}
    for path in path_list:
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise RoutingDataError(f"{path}: cannot read routing file ({exc.strerror})") from exc
        with fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise RoutingDataError(f"{where}: invalid JSON ({exc})") from exc
                row = parse_row(obj, where)
                # A duplicate id would be counted twice and would break id-hash splits (both copies
                # always land together, so it is harmless there, but it double-weights the row).
                if row.id in seen:
                    raise RoutingDataError(f"{where}: duplicate id {row.id!r} (first seen at {seen[row.id]})")
                seen[row.id] = where
                rows.append(row)
    if not rows:
        raise RoutingDataError(f"{', '.join(map(str, path_list))}: no rows")
    return tuple(rows)


def common_models(rows: Iterable[Row]) -> tuple[str, ...]:
    """Models that have an outcome on every row, sorted by name."""
    common: set[str] | None = None
    for row in rows:
        common = set(row.outcomes) if common is None else common & row.outcomes.keys()
    return tuple(sorted(common or ()))


def rows_with_models(rows: Sequence[Row], models: Iterable[str]) -> tuple[tuple[Row, ...], int]:
    """Rows that have an outcome for every model, and how many were dropped.

    Explicit because dropping rows changes the evaluation set: e.g. routerbench ARC lacks
    gpt-3.5-turbo-1106 on 12 of 1,031 rows; callers should report the dropped count.
    """
    wanted = set(models)
    kept = tuple(r for r in rows if wanted <= r.outcomes.keys())
    return kept, len(rows) - len(kept)


def _outcome(row: Row, model: str) -> Outcome:
    try:
        return row.outcomes[model]
    except KeyError:
        raise RoutingDataError(f"row {row.id!r} has no outcome for model {model!r}") from None


def scores(rows: Sequence[Row], model: str) -> FloatArray:
    return np.fromiter((_outcome(r, model).score for r in rows), dtype=np.float64, count=len(rows))


def has_costs(rows: Sequence[Row], model: str) -> bool:
    return all(_outcome(r, model).cost_usd is not None for r in rows)


def costs(rows: Sequence[Row], model: str) -> FloatArray:
    """Per-row `cost_usd`; refuses rows with a null cost rather than pretending they were free."""
    out = np.empty(len(rows), dtype=np.float64)
    for i, row in enumerate(rows):
        cost = _outcome(row, model).cost_usd
        if cost is None:
            raise RoutingDataError(f"row {row.id!r}: model {model!r} has no cost_usd")
        out[i] = cost
    return out


@dataclass(frozen=True, slots=True)
class PairOutcomes:
    """Aligned per-row outcomes of a strong and a weak model. Costs are None when any row lacks one."""

    strong: str
    weak: str
    strong_score: FloatArray
    weak_score: FloatArray
    strong_cost: FloatArray | None
    weak_cost: FloatArray | None

    @property
    def needs_strong(self) -> npt.NDArray[np.bool_]:
        """The two-tier label from the README: the weak model did worse than the strong one."""
        return self.weak_score < self.strong_score


def pair_outcomes(rows: Sequence[Row], strong: str, weak: str) -> PairOutcomes:
    if strong == weak:
        raise RoutingDataError(f"strong and weak model are the same ({strong!r})")
    priced = has_costs(rows, strong) and has_costs(rows, weak)
    return PairOutcomes(
        strong=strong,
        weak=weak,
        strong_score=scores(rows, strong),
        weak_score=scores(rows, weak),
        strong_cost=costs(rows, strong) if priced else None,
        weak_cost=costs(rows, weak) if priced else None,
    )


@dataclass(frozen=True, slots=True)
class TierOutcomes:
    """Per-row outcomes of N tiers, as (rows, tiers) matrices, tiers in the caller's order."""

    models: tuple[str, ...]
    score: FloatArray
    cost: FloatArray | None


def tier_outcomes(rows: Sequence[Row], models: Sequence[str]) -> TierOutcomes:
    if not models:
        raise RoutingDataError("at least one tier model is required")
    if len(set(models)) != len(models):
        raise RoutingDataError(f"tier models repeat: {list(models)}")
    score = np.column_stack([scores(rows, m) for m in models]) if rows else np.empty((0, len(models)))
    priced = all(has_costs(rows, m) for m in models)
    cost = np.column_stack([costs(rows, m) for m in models]) if priced and rows else None
    return TierOutcomes(models=tuple(models), score=score.astype(np.float64), cost=cost)


# --- deterministic splits -------------------------------------------------------------------------------


def id_unit(row_id: str, salt: str = "") -> float:
    """Map an id to [0, 1) with a keyed hash: stable across runs, machines and Python versions."""
    digest = hashlib.blake2b(row_id.encode(), digest_size=8, key=salt.encode()[:64]).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def split_train_dev(
    rows: Sequence[Row], dev_fraction: float, salt: str = "split"
) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """Rows whose id hashes below `dev_fraction` go to dev; original order is kept in both parts."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    train: list[Row] = []
    dev: list[Row] = []
    for row in rows:
        (dev if id_unit(row.id, salt) < dev_fraction else train).append(row)
    return tuple(train), tuple(dev)


def fold_of(row_id: str, k: int, salt: str = "kfold") -> int:
    return min(int(id_unit(row_id, salt) * k), k - 1)


def kfold_indices(
    rows: Sequence[Row], k: int, salt: str = "kfold", group_by_task: bool = False
) -> list[tuple[IntArray, IntArray]]:
    """K (train_idx, test_idx) pairs; every row index is in exactly one test fold.

    `group_by_task=True` hashes the task instead of the id, so a task never straddles train and test:
    the leave-tasks-out estimate the router needs to judge generalization to unseen tasks. With fewer
    distinct tasks than folds some folds are empty; callers should check.
    """
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    folds = np.fromiter(
        (fold_of(r.task if group_by_task else r.id, k, salt) for r in rows), dtype=np.int64, count=len(rows)
    )
    everything = np.arange(len(rows), dtype=np.int64)
    return [(everything[folds != f], everything[folds == f]) for f in range(k)]
