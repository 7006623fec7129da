"""`llmgw cascade`: replay a routed alias over a routing dataset, and train the answer scorer.

    llmgw cascade eval --config POLICY.yaml --data FILE [FILE ...] [--alias NAME] [--decisions-out FILE]
                       [--out DIR] [--weak MODEL] [--folds K] [--target-cost SHARE] [--select-tiers]
                       [--rows N] [--shuffle-seed S] [--as-configured [--cost-budget F]
                       [--prior-data FILE ...] [--no-prior]]
    llmgw cascade fit-prior --config POLICY.yaml --data FILE [FILE ...] [--alias NAME] [--out FILE]
    llmgw cascade guard-report --config POLICY.yaml --data FILE [FILE ...] [--alias NAME]
                       [--cost-budget F] [--rows N [N ...]] [--seeds S [S ...]] [--no-prior]
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
from eval.routing.data import Row
from eval.status import Status
from router.config import RoutingPolicy
from router.cost_guard import CostPrior


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
    ev.add_argument("--rows", type=int, help="only the first N rows (after --shuffle-seed)")
    ev.add_argument("--shuffle-seed", type=int, help="shuffle the rows with this seed first")
    ev.add_argument(
        "--prior-data",
        nargs="+",
        help="with --cost-budget: fit the guard's cold-start prior on these files (disjoint from --data) "
        "instead of using the shipped one (router/scorer_artifacts/cost_priors.json)",
    )
    ev.add_argument(
        "--no-prior", action="store_true", help="with --cost-budget: the guard starts from offset 0"
    )
    ev.set_defaults(func=run_eval)
    fp = sub.add_parser(
        "fit-prior", help="fit a routed alias's cost-guard prior (cost share per threshold offset)"
    )
    fp.add_argument("--config", required=True, help="gateway policy YAML with the routed alias")
    fp.add_argument("--alias", help="the routed alias (default: the only model with route.policy)")
    fp.add_argument("--data", required=True, nargs="+", help="calibration routing JSONL file(s)")
    fp.add_argument(
        "--out",
        help="priors file to add the alias's prior to (default: router/scorer_artifacts/cost_priors.json)",
    )
    fp.set_defaults(func=run_fit_prior)
    gr = sub.add_parser(
        "guard-report",
        help="the cost guard from a cold start: short runs of each file, file order and shuffled, each "
        "file's prior fitted on the other files",
    )
    gr.add_argument("--config", required=True, help="gateway policy YAML with the routed alias")
    gr.add_argument("--alias", help="the routed alias (default: the only model with route.policy)")
    gr.add_argument("--data", required=True, nargs="+", help="routing JSONL files (one run set each)")
    gr.add_argument("--cost-budget", type=float, default=0.4, help="share of strong-only cost (0.4)")
    gr.add_argument("--rows", type=int, nargs="+", default=[100, 300], help="first N rows (100 300)")
    gr.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3], help="shuffle seeds (1 2 3)")
    gr.add_argument("--no-prior", action="store_true", help="start every guard from offset 0")
    gr.set_defaults(func=run_guard_report)
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
    if args.cost_budget is not None and (not args.as_configured or not 0.0 < args.cost_budget <= 1.0):
        return _fail("--cost-budget needs --as-configured and a share in (0, 1]")
    if (args.prior_data or args.no_prior) and args.cost_budget is None:
        return _fail("--prior-data and --no-prior need --cost-budget")
    if args.rows is not None and args.rows < 1:
        return _fail("--rows needs N >= 1")
    found = _routed_alias(args.config, args.alias)
    if isinstance(found, int):
        return found
    name, routing, pool_models = found
    with Status("llmgw cascade eval") as status:
        status.phase(f"reading {args.data}")
        return _eval_rows(args, name, routing, pool_models, status)


def _routed_alias(config: str, alias: str | None) -> tuple[str, RoutingPolicy, dict[str, str]] | int:
    """The config's routed alias (the one named, or the only one) and its pools' models; else the
    exit code of the failure (already reported)."""
    from gateway.config import ConfigError, load_policy

    try:
        gw = load_policy(config)
    except ConfigError as exc:
        return _fail(str(exc))
    routed = [m for m in gw.models if m.route.policy is not None and (alias in (None, m.name))]
    if len(routed) != 1:
        names = [m.name for m in gw.models if m.route.policy is not None]
        return _fail(f"{config}: need exactly one routed alias (--alias); routed aliases: {names}")
    routing = routed[0].route.policy
    assert routing is not None
    return routed[0].name, routing, {p.name: p.model for p in gw.pools}


def _eval_rows(
    args: argparse.Namespace,
    alias: str,
    routing: RoutingPolicy,
    pool_models: dict[str, str],
    status: Status,
) -> int:
    from eval.routing.cascade_eval import as_configured, check_replayable, cross_validate, summarize
    from eval.routing.cost_guard_report import ordered
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
        rows = tuple(ordered(rows, args.shuffle_seed)[: args.rows])
        check_replayable(routing, list(used.values()), rows)
        difficulty = _load_difficulty(args.difficulty) if args.difficulty else None
        status.phase(
            f"replaying {len(rows)} rows" + ("" if args.as_configured else f", {args.folds}-fold CV")
        )
        if args.as_configured:
            prior = None
            if args.cost_budget is not None and not args.no_prior:
                prior, prior_note = _prior(args, routing, used, rows)
                print(prior_note)
            result = as_configured(rows, routing, used, difficulty, args.cost_budget, prior)
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


def _prior(
    args: argparse.Namespace, routing: RoutingPolicy, pool_models: dict[str, str], rows: Sequence[Row]
) -> tuple[CostPrior | None, str]:
    """The guard's cold-start prior (fitted on --prior-data, or the shipped one) and a line saying
    what it rests on; a prior fitted on the evaluated rows is refused, a shipped one that saw them is
    flagged (its figures are then not a cold start on unseen traffic)."""
    from eval.routing.cascade_eval import fit_cost_prior
    from eval.routing.data import load_rows, rows_with_models
    from router.cost_guard import CostGuard, shipped_prior

    if args.prior_data:
        calibration, _ = rows_with_models(
            load_rows(args.prior_data), [pool_models[t.pool] for t in routing.tiers]
        )
        ids = {r.id for r in rows}
        if any(r.id in ids for r in calibration):
            raise CascadeEvalError(
                "--prior-data shares rows with --data: a prior must not see the rows it is judged on"
            )
        prior = fit_cost_prior(
            calibration, routing, pool_models, data=[Path(d).name for d in args.prior_data]
        )
        source = "fitted on --prior-data"
    else:
        shipped = shipped_prior([t.pool for t in routing.tiers], routing.cascade) if routing.cascade else None
        if shipped is None:
            return None, "cost prior: none shipped for this alias (the guard starts at offset 0)"
        prior, source = shipped, "shipped"
    seen = sorted(set(prior.data) & {Path(d).name for d in args.data})
    warn = f"; WARNING: it saw {', '.join(seen)} (not a cold start on unseen rows)" if seen else ""
    return prior, (
        f"cost prior: {source}, {prior.rows} rows of {', '.join(prior.data) or '?'}; "
        f"starting offset {CostGuard(args.cost_budget, prior=prior).initial_offset:.2f}{warn}"
    )


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


def _guarded_alias(config: str, alias: str | None) -> tuple[str, RoutingPolicy, dict[str, str]] | int:
    """`_routed_alias`, refused when it has no cascade (a cost guard would have nothing to steer)."""
    found = _routed_alias(config, alias)
    if not isinstance(found, int) and found[1].cascade is None:
        return _fail(f"alias {found[0]} has no cascade: a cost guard has nothing to steer")
    return found


def run_fit_prior(args: argparse.Namespace) -> int:
    """Fit the alias's prior on --data and add it to the priors file under the cascade's key."""
    from eval.routing.cascade_eval import check_replayable, fit_cost_prior
    from eval.routing.data import RoutingDataError, load_rows, rows_with_models
    from router.cost_guard import SHIPPED_PRIORS, CostGuard, cascade_key, read_priors, write_priors

    found = _guarded_alias(args.config, args.alias)
    if isinstance(found, int):
        return found
    name, routing, pool_models = found
    out = (
        Path(args.out)
        if args.out
        else Path(__file__).resolve().parents[2] / "router" / "scorer_artifacts" / SHIPPED_PRIORS
    )
    tiers = [t.pool for t in routing.tiers]
    try:
        rows, _ = rows_with_models(load_rows(args.data), [pool_models[p] for p in tiers])
        check_replayable(routing, [pool_models[p] for p in tiers], rows)
        prior = fit_cost_prior(rows, routing, pool_models, data=[Path(d).name for d in args.data])
        priors = read_priors(out.read_text(encoding="utf-8"), str(out)) if out.exists() else {}
    except (RoutingDataError, CascadeEvalError, OSError, ValueError) as exc:
        return _fail(str(exc))
    assert routing.cascade is not None  # _guarded_alias refused an alias without one
    priors[cascade_key(tiers, routing.cascade)] = {"alias": name, "tiers": tiers, "prior": prior.to_dict()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(write_priors(priors), encoding="utf-8")
    for budget in (0.2, 0.3, 0.4, 0.5):
        print(f"budget {budget:.0%}: starting offset {CostGuard(budget, prior=prior).initial_offset:.2f}")
    print(f"wrote the prior of {name} ({len(rows)} rows) to {out}")
    return 0


def run_guard_report(args: argparse.Namespace) -> int:
    """Issue 45's cold-start acceptance: the table; exit 1 when a run leaves budget + tolerance."""
    from eval.routing.cost_guard_report import guard_report, report_table
    from eval.routing.data import RoutingDataError
    from router.cost_guard import TOLERANCE

    if not 0.0 < args.cost_budget <= 1.0 or any(n < 1 for n in args.rows):
        return _fail("--cost-budget is a share in (0, 1] and --rows are N >= 1")
    found = _guarded_alias(args.config, args.alias)
    if isinstance(found, int):
        return found
    name, routing, pool_models = found
    try:
        with Status("llmgw cascade guard-report") as status:
            status.phase(
                f"replaying {len(args.data)} files x {len(args.rows)} sizes x {1 + len(args.seeds)} orders"
            )
            runs = guard_report(
                args.data, routing, pool_models, args.cost_budget, args.rows, args.seeds, not args.no_prior
            )
    except (RoutingDataError, CascadeEvalError, OSError, ValueError) as exc:
        return _fail(str(exc))
    print(
        f"alias {name}; each file's cost prior fitted on the other files"
        + (" (off)" if args.no_prior else "")
    )
    print(report_table(runs, args.cost_budget))
    return 0 if all(r.max_running_share <= args.cost_budget + TOLERANCE + 1e-12 for r in runs) else 1
