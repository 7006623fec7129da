"""`llmgw cascade`: replay a routed alias over a routing dataset, and train the answer scorer.

    llmgw cascade eval --config POLICY.yaml --data FILE [FILE ...] [--alias NAME] [--decisions-out FILE]
                       [--out DIR] [--weak MODEL] [--folds K] [--target-cost SHARE] [--select-tiers]
    llmgw cascade train-scorer --data FILE [FILE ...] --out FILE [--config POLICY.yaml --alias NAME]
    llmgw cascade pool REPORT [REPORT ...]

`--config` is a gateway policy YAML: the alias's `route.policy.tiers` name pools whose `model` is a
model of the dataset, so the same file drives the gateway against replaying simulators. Quality and
cost are relative to strong-only (the last tier answering every row) with the rows' real `cost_usd`;
the gap recovered is measured from `--weak` (default: the first tier's model). `--decisions-out`
writes one `{"id", "tier", "escalated", "score"}` line per row (tier = the answering pool's name).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from eval.routing.cascade_eval import CascadeEvalError, CvResult, Summary
from eval.status import Status
from router.config import RoutingPolicy


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay a routing dataset through a routed alias, or train the cascade's answer scorer."
    )
    sub = parser.add_subparsers(dest="cascade_command", required=True)
    ev = sub.add_parser("eval", help="replay a routing dataset through a routed alias (policy + cascade)")
    ev.add_argument("--config", required=True, help="gateway policy YAML with a routed alias")
    ev.add_argument("--data", required=True, nargs="+", help="routing JSONL file(s); several = pooled")
    ev.add_argument("--alias", help="the routed alias (default: the only model with route.policy)")
    ev.add_argument("--decisions-out", help='write {"id","tier","escalated","score"} per row here')
    ev.add_argument("--out", help="directory for report.json and plots")
    ev.add_argument("--weak", help="reference weak model for the gap recovered (default: first tier's)")
    ev.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    ev.add_argument(
        "--target-cost", type=float, default=0.35, help="cost budget, share of strong-only, for fitting"
    )
    ev.add_argument(
        "--select-tiers", action="store_true", help="pick the cheap tiers per fold from all pools"
    )
    ev.add_argument("--no-fit", action="store_true", help="use the YAML's thresholds as they are")
    ev.add_argument(
        "--scorer",
        choices=["auto", "answer", "step"],
        default="auto",
        help="what to train per fold for a trained scorer: answer-only (format 1) or a step scorer of "
        "the alias (format 2); auto: the format of the configured artifact",
    )
    ev.add_argument(
        "--inner-folds",
        type=int,
        default=0,
        help="fit the threshold on out-of-fold scores from this many inner folds (0: on the training "
        "rows' own scores)",
    )
    ev.add_argument(
        "--as-configured",
        action="store_true",
        help="replay exactly what the gateway runs (YAML thresholds, shipped scorer artifact; no folds, "
        "no fitting): decisions equal the gateway's; figures are not held-out estimates",
    )
    ev.add_argument(
        "--cost-budget",
        type=float,
        help="with --as-configured: replay in file order through a CostGuard, cost <= F of strong-only",
    )
    ev.add_argument("--difficulty", help='JSONL of {"id","difficulty"} (llmgw router score output)')
    ev.set_defaults(func=run_eval)
    tr = sub.add_parser("train-scorer", help="train the answer scorer on (prompt, response) pairs")
    tr.add_argument("--data", required=True, nargs="+")
    tr.add_argument("--out", required=True, help="artifact path (JSON)")
    tr.add_argument("--models", nargs="*", help="train on these models' responses only (default: all)")
    tr.add_argument(
        "--config", help="with --alias: train a step scorer (format 2) for this gateway YAML's alias"
    )
    tr.add_argument("--alias", help="the routed alias a step scorer is trained for")
    tr.set_defaults(func=run_train)
    po = sub.add_parser("pool", help="pool several `cascade eval --out` reports (disjoint rows)")
    po.add_argument("reports", nargs="+", help="report.json files or the directories holding them")
    po.set_defaults(func=run_pool)


def _fail(msg: str) -> int:
    print(f"llmgw cascade: {msg}", file=sys.stderr)
    return 2


def _load_difficulty(path: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                obj = json.loads(line)
                if not isinstance(obj.get("id"), str) or not isinstance(obj.get("difficulty"), int | float):
                    raise CascadeEvalError(f"{path}:{lineno}: expected {{'id': str, 'difficulty': number}}")
                out[obj["id"]] = float(obj["difficulty"])
    return out


def _step_scorer(choice: str, routing: RoutingPolicy) -> bool:
    """Whether cross-validation trains step scorers: as asked, or like the configured artifact."""
    if choice != "auto":
        return choice == "step"
    from router.config import TrainedScorer
    from router.scorers import TrainedAnswerScorer

    scorers = routing.cascade.scorers if routing.cascade else ()
    cfg = next((s for s in scorers if isinstance(s, TrainedScorer)), None)
    return cfg is not None and TrainedAnswerScorer.load(cfg.artifact).uses_context


def run_eval(args: argparse.Namespace) -> int:
    from gateway.config import ConfigError, load_policy

    if args.cost_budget is not None and (not args.as_configured or not 0.0 < args.cost_budget <= 1.0):
        return _fail("--cost-budget needs --as-configured and a share in (0, 1]")
    try:
        gw = load_policy(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    routed = [m for m in gw.models if m.route.policy is not None and (args.alias in (None, m.name))]
    if len(routed) != 1:
        names = [m.name for m in gw.models if m.route.policy is not None]
        return _fail(f"{args.config}: need exactly one routed alias (--alias); routed aliases: {names}")
    alias = routed[0]
    routing = alias.route.policy
    assert routing is not None
    pool_models = {p.name: p.model for p in gw.pools}
    with Status("llmgw cascade eval") as status:
        status.phase(f"reading {args.data}")
        return _eval_rows(args, alias.name, routing, pool_models, status)


def _eval_rows(
    args: argparse.Namespace,
    alias: str,
    routing: RoutingPolicy,
    pool_models: dict[str, str],
    status: Status,
) -> int:
    from eval.routing.cascade_eval import as_configured, check_replayable, cross_validate, summarize
    from eval.routing.data import RoutingDataError, load_rows, rows_with_models

    try:
        rows = load_rows(args.data)
        data_models = set().union(*(r.outcomes.keys() for r in rows))
        # With --select-tiers every pool whose model the data has is a candidate cheap tier.
        candidates = {p: m for p, m in pool_models.items() if m in data_models} if args.select_tiers else {}
        tier_pools = {t.pool: pool_models[t.pool] for t in routing.tiers}
        used = {**candidates, **tier_pools}
        missing = sorted(m for m in used.values() if m not in data_models)
        if missing:
            return _fail(f"pools serve models the data does not have: {missing}")
        weak = args.weak or pool_models[routing.tiers[0].pool]
        rows, dropped = rows_with_models(rows, [*used.values(), weak])
        if not rows:
            return _fail("no row has outcomes for every tier model")
        check_replayable(routing, list(used.values()), rows)
        difficulty = _load_difficulty(args.difficulty) if args.difficulty else None
        status.phase(
            f"replaying {len(rows)} rows" + ("" if args.as_configured else f", {args.folds}-fold CV")
        )
        if args.as_configured:
            result = as_configured(rows, routing, used, difficulty, args.cost_budget)
        else:
            result = cross_validate(
                rows,
                routing,
                used,
                k=args.folds,
                target_cost_share=args.target_cost,
                fit_threshold=not args.no_fit,
                select_tiers=args.select_tiers,
                difficulty=difficulty,
                step_scorer=_step_scorer(args.scorer, routing),
                inner_folds=args.inner_folds,
            )
    except (RoutingDataError, CascadeEvalError, OSError, ValueError) as exc:
        return _fail(str(exc))
    strong = pool_models[routing.tiers[-1].pool]
    pools = sorted({d.pool for d in result.decisions if d.pool}, key=lambda p: _price_rank(rows, used[p]))
    overall = summarize(result.decisions, rows, strong, weak, pools)
    by_task = {
        task: summarize([d for d in result.decisions if d.task == task], rows, strong, weak, pools)
        for task in sorted({r.task for r in rows})
    }
    print(_report_text(alias, args.data, dropped, strong, weak, overall, by_task, result))
    if args.decisions_out:
        _write_decisions(Path(args.decisions_out), result)
    if args.out:
        from eval.routing.cascade_report import write_report

        status.phase(f"writing the report and plots to {args.out}")
        write_report(Path(args.out), rows, used, strong, weak, overall, by_task, result)
        print(f"report and plots in {args.out}")
    return 0


def _price_rank(rows: Sequence[object], model: str) -> float:
    from eval.routing.data import Row

    return sum((r.outcomes[model].cost_usd or 0.0) for r in rows if isinstance(r, Row))


def _write_decisions(path: Path, result: CvResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for d in result.decisions:
            fh.write(
                json.dumps({"id": d.id, "tier": d.pool, "escalated": d.escalated, "score": d.score}) + "\n"
            )


def _line(name: str, s: Summary) -> str:
    shares = " ".join(f"{p}={v:.1%}" for p, v in s.tier_share.items() if v)
    esc = " ".join(f"{k}={v}" for k, v in s.escalations.items()) or "-"
    return (
        f"{name:<16} n={s.n:<5} quality {s.quality:.4f} (strong {s.strong_quality:.4f}, weak "
        f"{s.weak_quality:.4f})  gap recovered {s.gap_recovered:6.1%}  cost {s.cost_share:6.1%} of "
        f"strong-only (${s.cost_usd:.4f} vs ${s.strong_cost_usd:.4f})\n"
        f"{'':<16} answered by: {shares}\n{'':<16} escalated rows {s.escalated_rows}; reasons: {esc}"
    )


def _report_text(
    alias: str,
    data: Sequence[str],
    dropped: int,
    strong: str,
    weak: str,
    overall: Summary,
    by_task: dict[str, Summary],
    result: CvResult,
) -> str:
    lines = [
        f"alias {alias} on {', '.join(Path(d).name for d in data)} "
        f"({dropped} rows dropped: missing a tier model)",
        f"strong = {strong}, weak reference = {weak}; {len(result.fits)}-fold cross-validated",
        _line("pooled" if len(by_task) > 1 else "all", overall),
    ]
    if len(by_task) > 1:
        lines += [_line(task, s) for task, s in by_task.items()]
    for f in result.fits:
        thr = "-" if f.threshold is None else f"{f.threshold:.2f}"
        lines.append(
            f"fold {f.fold}: tiers {' -> '.join(f.pools)}  trained threshold {thr}  "
            f"(train quality {f.train_quality:.4f}, cost {f.train_cost_share:.1%})"
        )
    return "\n".join(lines)


def run_train(args: argparse.Namespace) -> int:
    from eval.routing.data import RoutingDataError, load_rows, rows_with_models
    from eval.routing.scorer_train import describe, train_scorer, train_step_scorer
    from gateway.config import ConfigError, load_policy

    meta: dict[str, object] = {"models": args.models or "all"}
    try:
        rows = load_rows(args.data)
        if args.config:
            gw = load_policy(args.config)
            alias = next((m for m in gw.models if m.name == args.alias and m.route.policy), None)
            if alias is None or alias.route.policy is None:
                return _fail(f"{args.config}: no routed alias {args.alias!r} (--alias)")
            pool_models = {p.name: p.model for p in gw.pools}
            tier_models = [pool_models[t.pool] for t in alias.route.policy.tiers]
            rows, _ = rows_with_models(rows, tier_models)
            extra = sorted({m for r in rows for m in r.outcomes} - set(tier_models))
            scorer = train_step_scorer(
                rows, alias.route.policy, tier_models, extra_models=args.models or extra
            )
            # The tier indices the scorer learned refer to this tier list: record it with the weights.
            meta["tiers"] = [t.pool for t in alias.route.policy.tiers]
            meta["alias"] = alias.name
        else:
            scorer = train_scorer(rows, models=args.models or None)
    except (RoutingDataError, ConfigError, ValueError) as exc:
        return _fail(str(exc))
    meta |= {"data": [Path(d).name for d in args.data], "rows": len(rows)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(scorer.to_json(meta) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes); largest dense weights: {describe(scorer)}")
    return 0


def run_pool(args: argparse.Namespace) -> int:
    """One alias per task, each evaluated on its own file: the figures over all their rows together."""
    from eval.routing.cascade_report import pool_reports

    paths = [Path(r) / "report.json" if Path(r).is_dir() else Path(r) for r in args.reports]
    try:
        strong, weak, pooled = pool_reports(paths)
    except (CascadeEvalError, OSError, ValueError, KeyError) as exc:
        return _fail(str(exc))
    print(f"{len(paths)} reports pooled; strong = {strong}, weak reference = {weak}")
    print(_line("pooled", pooled))
    return 0
