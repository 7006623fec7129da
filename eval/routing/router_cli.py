"""`llmgw router {train,eval,score}`: the difficulty router's stable command-line interface.

    llmgw router train --data FILE... --out DIR [--exclude FILE...] [--pair-data FILE STRONG WEAK]...
    llmgw router eval  --model DIR --data FILE --strong M --weak M [--out DIR] [--prior-train FILE...]
    llmgw router score [--model DIR] --in FILE --out FILE
    llmgw router replay --data FILE --out DIR [--prior DIR] [--seed N | --seeds N...] [--explore-rate R]
                        [--judge recorded|agreement] [--memory FILE...] [--warmup N] [--rows N]
    llmgw router train-success --data FILE... --out DIR [--exclude FILE...] [--seed N]
    llmgw router loso --data-dir DIR [--seeds N...] [--sources NAME...] [--like MODEL TRAINED]... [--out DIR]
    llmgw router tiers --data FILE --tier MODEL USD_PER_CALL... [--model DIR] [--budget X] [--out DIR]

`score` reads only `id` and `prompt` from each line (a production request has no task label or
outcome) and writes `{"id", "difficulty"}` per line, in input order; without `--model` it uses the
artifact the gateway serves by default. `train-success`, `loso` and `tiers` build and judge the
multi-model success predictor (router/success.py; eval/routing/success_*.py, docs/design/031).
Exit codes: 0 ok, 2 bad input or artifact.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from eval.routing.baselines import DEFAULT_STRONG, DEFAULT_WEAK
from eval.status import Status
from router.encoder import ROUTER_LAYERS


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Train, evaluate and run the prompt difficulty router."
    sub = parser.add_subparsers(dest="router_command", required=True)

    t = sub.add_parser("train", help="train a difficulty artifact on routing files")
    t.add_argument("--data", nargs="+", required=True, metavar="FILE", help="routing JSONL file(s)")
    t.add_argument("--out", required=True, type=Path, help="artifact directory to write")
    t.add_argument(
        "--exclude", nargs="*", default=[], metavar="FILE", help="drop training prompts found here"
    )
    t.add_argument(
        "--pair-data",
        nargs=3,
        action="append",
        default=[],
        metavar=("FILE", "STRONG", "WEAK"),
        help="extra training file scored with its own strong/weak pair (repeatable; never a CV test row)",
    )
    t.add_argument(
        "--strong", default=DEFAULT_STRONG, help=f"the strong model of the data (default: {DEFAULT_STRONG})"
    )
    t.add_argument(
        "--weak", default=DEFAULT_WEAK, help=f"the weak model of the data (default: {DEFAULT_WEAK})"
    )
    t.add_argument("--max-tokens", type=int, default=32, help="tail token budget of the encoder input")
    t.add_argument(
        "--layers",
        type=int,
        default=ROUTER_LAYERS,
        help=f"encoder depth: the first K MiniLM layers, a variant make router-encoder builds "
        f"(default {ROUTER_LAYERS}; 6 = the full model)",
    )
    t.add_argument("--k", nargs="+", type=int, default=[50, 100, 200, 400, 800], help="kNN sizes averaged")
    t.add_argument("--rank", type=int, default=96, help="PCA rank of the kNN keys")
    t.add_argument("--alpha", type=float, default=100.0, help="ridge regularization")
    t.add_argument("--lexical-alpha", type=float, default=10.0, help="ridge regularization of the word model")
    t.add_argument("--folds", type=int, default=5)
    t.add_argument("--name", default="difficulty")
    t.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    t.set_defaults(func=_train)

    e = sub.add_parser("eval", help="APGR / CPT / quality at shares vs random, prior and oracle")
    e.add_argument("--model", required=True, type=Path, help="artifact directory")
    e.add_argument("--data", required=True, type=Path, help="routing JSONL file with outcomes")
    e.add_argument("--strong", required=True, help="the strong model: a model name of the data's outcomes")
    e.add_argument("--weak", required=True, help="the weak model: a model name of the data's outcomes")
    e.add_argument(
        "--prior-train",
        nargs="*",
        default=[],
        help="fit the per-task prior here (default: the artifact's training files)",
    )
    e.add_argument("--out", type=Path, help="directory for router_eval.json and the PNG plots")
    e.set_defaults(func=_eval)

    s = sub.add_parser("score", help="write {id, difficulty} for every line of a routing-format file")
    s.add_argument("--model", type=Path, help="artifact directory (default: the shipped artifact)")
    s.add_argument("--in", dest="input", required=True, type=Path)
    s.add_argument("--out", required=True, type=Path)
    s.set_defaults(func=_score)

    r = sub.add_parser("replay", help="simulate a deployment that learns from explored outcomes")
    r.add_argument("--data", required=True, type=Path, help="routing JSONL file replayed as traffic")
    r.add_argument("--prior", type=Path, help="difficulty artifact (default: the shipped artifact)")
    r.add_argument(
        "--strong", default=DEFAULT_STRONG, help=f"the strong model of the data (default: {DEFAULT_STRONG})"
    )
    r.add_argument(
        "--weak", default=DEFAULT_WEAK, help=f"the weak model of the data (default: {DEFAULT_WEAK})"
    )
    r.add_argument("--seed", type=int, help="shuffle the rows with this seed (absent: file order)")
    r.add_argument("--seeds", nargs="+", type=int, default=[], help="one run per seed (shuffled)")
    r.add_argument("--explore-rate", type=float, default=0.05, help="share of cheap-routed rows explored")
    r.add_argument(
        "--judge",
        choices=("recorded", "agreement"),
        default="recorded",
        help="how an explored row is labelled: its recorded outcome, or the answers' agreement",
    )
    r.add_argument("--memory", nargs="*", type=Path, default=[], help="files that seed the memory first")
    r.add_argument("--warmup", type=int, default=0, help="labels before `apgr` starts counting rows")
    r.add_argument("--rows", type=int, help="replay only the first N rows (after shuffling)")
    r.add_argument("--k", type=int, default=64, help="neighbours per query")
    r.add_argument("--blend-c", type=float, default=128.0, help="blend weight n_eff / (n_eff + c)")
    r.add_argument(
        "--blend-scale",
        choices=("prior", "probability"),
        default="prior",
        help="blend the kNN share on the prior's percentile scale or mix it in as a probability",
    )
    r.add_argument("--target-share", type=float, default=0.3, help="strong share the threshold targets")
    r.add_argument("--out", required=True, type=Path, help="directory for report.json and the PNG")
    r.add_argument("--scores-out", type=Path, help="write {id, difficulty} per row as routed (first run)")
    r.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    r.set_defaults(func=_replay)

    ts = sub.add_parser(
        "train-success", help="train the multi-model success predictor (router/success.py) on routing files"
    )
    ts.add_argument("--data", nargs="+", required=True, metavar="FILE", help="routing JSONL file(s)")
    ts.add_argument("--out", required=True, type=Path, help="artifact directory to write")
    ts.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        metavar="FILE",
        help="drop training prompts that repeat one of these files' (verbatim or a shared 13-word n-gram)",
    )
    ts.add_argument("--seed", type=int, default=0, help="initialisation seed")
    ts.add_argument("--latent", type=int, help="latent prompt dimensions (default: the recipe's)")
    ts.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    ts.set_defaults(func=_train_success)

    lo = sub.add_parser(
        "loso",
        help="leave-one-source-out APGR: the success predictor vs today's prior, per held-out source",
    )
    lo.add_argument("--data-dir", required=True, type=Path, help="directory of the shared routing files")
    lo.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="success predictor seeds")
    lo.add_argument("--sources", nargs="*", default=[], help="only these held-out sources (default: all 7)")
    lo.add_argument(
        "--like",
        nargs=2,
        action="append",
        default=[],
        metavar=("MODEL", "TRAINED"),
        help="score an untrained pair model as this trained one (repeatable)",
    )
    lo.add_argument("--out", type=Path, help="write loso.json and loso.md here")
    lo.set_defaults(func=_loso)

    ti = sub.add_parser(
        "tiers", help="N priced tiers: cheapest tier within a tolerance of the best predicted success"
    )
    ti.add_argument("--model", type=Path, help="success predictor directory (default: the shipped one)")
    ti.add_argument("--data", required=True, type=Path, help="routing JSONL file with every tier's outcome")
    ti.add_argument(
        "--tier",
        nargs=2,
        action="append",
        required=True,
        metavar=("MODEL", "USD_PER_CALL"),
        help="a tier and its price per call, cheapest first (repeatable)",
    )
    ti.add_argument("--budget", type=float, default=0.4, help="cost share of the top tier to report at")
    ti.add_argument("--out", type=Path, help="write tiers.json and tiers.png here")
    ti.set_defaults(func=_tiers)


def _error(exc: BaseException) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _train(args: argparse.Namespace) -> int:
    from eval.routing.data import RoutingDataError
    from eval.routing.train import PairFile, TrainConfig, train
    from router.artifact_error import RouterArtifactError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = TrainConfig(
        strong=args.strong,
        weak=args.weak,
        max_tokens=args.max_tokens,
        layers=args.layers,
        ks=tuple(args.k),
        rank=args.rank,
        alpha=args.alpha,
        lexical_alpha=args.lexical_alpha,
        folds=args.folds,
        name=args.name,
    )
    try:
        path, info = train(
            args.data,
            args.out,
            cfg,
            exclude=args.exclude,
            cache_dir=None if args.no_cache else Path(".cache/router-embeddings"),
            progress=True,
            pair_data=PairFile.parse(args.pair_data),
        )
    except (RoutingDataError, RouterArtifactError, ValueError) as exc:
        return _error(exc)
    cv = info["cv"]
    print(
        f"artifact written to {path}: {info['rows_used']} rows ({info['rows_primary']} primary), "
        f"dropped {info['dropped']}"
    )
    for kind in ("id", "task"):
        if kind in cv and cv[kind]["apgr_mean"] is not None:
            c = cv[kind]
            print(f"  {kind}-CV APGR {c['apgr_mean']:.4f} +- {c['apgr_std']:.4f}  folds {c['folds']}")
    if info.get("cv_caveat"):
        print(f"  note: {info['cv_caveat']}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from eval.routing.data import RoutingDataError
    from eval.routing.router_eval import evaluate, format_text, write_outputs
    from router.artifact_error import RouterArtifactError
    from router.difficulty import DifficultyModel

    with Status("llmgw router eval") as status:
        status.phase("loading the artifact")
        try:
            model = DifficultyModel.load(args.model)
        except RouterArtifactError as exc:
            return _error(exc)
        try:
            status.phase(f"scoring {args.data} and fitting the baselines")
            ev = evaluate(model, args.data, args.strong, args.weak, args.prior_train)
            print(format_text(ev, model))
            if args.out is not None:
                status.phase(f"writing the report and plots to {args.out}")
                for path in write_outputs(ev, model, args.data, args.out):
                    print(f"wrote {path}")
        except (RoutingDataError, ValueError) as exc:
            return _error(exc)
        finally:
            model.close()
    return 0


def _read_requests(path: Path) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj: Any = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({exc})") from exc
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("id"), str)
                or not isinstance(obj.get("prompt"), str)
            ):
                raise ValueError(f"{path}:{lineno}: each line needs string fields 'id' and 'prompt'")
            out.append((obj["id"], obj["prompt"]))
    return out


def _score(args: argparse.Namespace) -> int:
    from router.artifact_error import RouterArtifactError
    from router.difficulty import DifficultyModel, request_text

    try:
        requests = _read_requests(args.input)
    except OSError as exc:
        return _error(f"{args.input}: cannot read ({exc.strerror})")  # type: ignore[arg-type]
    except ValueError as exc:
        return _error(exc)
    try:
        model = DifficultyModel.load(args.model)
    except RouterArtifactError as exc:
        return _error(exc)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "wb") as fh, Status("llmgw router score") as status:
            for start in range(0, len(requests), 64):
                status.phase(f"scored {start} of {len(requests)} prompts")
                chunk = requests[start : start + 64]
                texts = [request_text([{"role": "user", "content": prompt}]) for _, prompt in chunk]
                for (rid, _), d in zip(chunk, model.score_many(texts), strict=True):
                    fh.write(orjson.dumps({"id": rid, "difficulty": round(d, 6)}) + b"\n")
    finally:
        model.close()
    print(f"scored {len(requests)} prompts with {model.identity} -> {args.out}", file=sys.stderr)
    return 0


def _replay(args: argparse.Namespace) -> int:
    from eval.routing.data import RoutingDataError, load_rows
    from eval.routing.embed_cache import DEFAULT_CACHE_DIR
    from eval.routing.replay import prepare
    from eval.routing.replay_report import combine, format_text, write_outputs, write_scores
    from router.artifact_error import RouterArtifactError
    from router.difficulty import DifficultyModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not 0.0 <= args.explore_rate <= 1.0:
        return _error(ValueError(f"--explore-rate must be in [0, 1], got {args.explore_rate}"))
    try:
        model = DifficultyModel.load(args.prior)
    except RouterArtifactError as exc:
        return _error(exc)
    cache = None if args.no_cache else DEFAULT_CACHE_DIR
    try:
        with Status("llmgw router replay") as status:
            status.phase(f"embedding {args.data}")
            data = prepare(load_rows(args.data), model, args.strong, args.weak, cache)
            status.phase("embedding the --memory files")
            seeded = [prepare(load_rows(p), model, args.strong, args.weak, cache) for p in args.memory]
            runs, first = _replay_seeds(args, data, seeded, model.identity, status)
    except (RoutingDataError, ValueError, OSError) as exc:
        return _error(exc)
    finally:
        model.close()
    combined = combine(runs)
    print(format_text(combined))
    for path in write_outputs(combined, args.out):
        print(f"wrote {path}")
    if args.scores_out is not None and first is not None:
        print(f"wrote {write_scores(args.scores_out, first[0], first[1])}")
    return 0


def _replay_seeds(
    args: argparse.Namespace, data: Any, seeded: list[Any], prior: str, status: Status
) -> tuple[list[dict[str, Any]], Any]:
    """One replay per seed (`--seeds`, else `--seed`): the reports and the first run's (ids, routed)."""
    from eval.routing.replay import ReplayConfig, replay

    threshold = 1.0 - args.target_share  # the prior's difficulty is a training percentile
    runs: list[dict[str, Any]] = []
    first = None
    seeds = args.seeds or [args.seed]
    for i, seed in enumerate(seeds, 1):
        status.phase(f"replaying seed {seed} ({i} of {len(seeds)})")
        cfg = ReplayConfig(
            explore_rate=args.explore_rate,
            judge=args.judge,
            warmup=args.warmup,
            seed=seed,
            k=args.k,
            blend_c=args.blend_c,
            blend_scale=args.blend_scale,
            target_share=args.target_share,
        )
        report, routed, ids = replay(data, cfg, threshold, seeded, args.rows)
        report |= {"strong": args.strong, "weak": args.weak, "data": str(args.data), "prior": prior}
        runs.append(report)
        first = first or (ids, routed)
    return runs, first


def _train_success(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from eval.routing.data import RoutingDataError
    from eval.routing.success_train import SuccessConfig, train_success
    from router.artifact_error import RouterArtifactError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = SuccessConfig(seed=args.seed)
    if args.latent is not None:
        cfg = replace(cfg, latent=args.latent)
    try:
        path, info = train_success(
            args.data,
            args.out,
            cfg,
            exclude=args.exclude,
            cache_dir=None if args.no_cache else Path(".cache/router-embeddings"),
        )
    except (RoutingDataError, RouterArtifactError, ValueError) as exc:
        return _error(exc)
    print(
        f"success predictor written to {path}: {info['rows']} prompts, {info['pairs']} outcomes, "
        f"{info['models']} models, sources {info['sources']}, dropped {info['dropped']}"
    )
    return 0


def _loso(args: argparse.Namespace) -> int:
    import json

    from eval.routing.data import RoutingDataError
    from eval.routing.success_eval import (
        SOURCES,
        evaluate_fold,
        load_sources,
        loso_table,
        make_fold,
        result_json,
    )
    from eval.routing.success_train import SuccessConfig
    from router.artifact_error import RouterArtifactError
    from router.encoder import Encoder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    unknown = set(args.sources) - {s.name for s in SOURCES}
    if unknown:
        return _error(ValueError(f"unknown sources {sorted(unknown)}; known: {[s.name for s in SOURCES]}"))
    cfg = SuccessConfig()
    try:
        encoder = Encoder.load(layers=cfg.layers)
        loaded = load_sources(args.data_dir)
    except (RoutingDataError, RouterArtifactError) as exc:
        return _error(exc)
    results = []
    with Status("llmgw router loso") as status:
        for source in SOURCES:
            if args.sources and source.name not in args.sources:
                continue
            status.phase(f"holding out {source.name}: training both routers on the other sources")
            result = evaluate_fold(make_fold(source, loaded), cfg, args.seeds, encoder, like=dict(args.like))
            results.append(result)
            print(
                f"{source.name}: prior {result.prior:.4f}, new {[round(x, 4) for x in result.new]}, "
                f"pair {dict(result.mapping)}",
                flush=True,
            )
    table = loso_table(results)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {"recipe": cfg.__repr__(), "seeds": args.seeds, "folds": [result_json(r) for r in results]}
        (args.out / "loso.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "loso.md").write_text(table + "\n")
        print(f"wrote {args.out / 'loso.json'} and {args.out / 'loso.md'}")
    return 0


def _tiers(args: argparse.Namespace) -> int:
    import json

    from eval.routing.data import RoutingDataError, load_rows, rows_with_models, tier_outcomes
    from eval.routing.embed_cache import DEFAULT_CACHE_DIR, embed_texts
    from eval.routing.success_eval import plot_tiers, resolve, tier_report
    from eval.routing.train import row_texts
    from router.artifact_error import RouterArtifactError
    from router.encoder import Encoder
    from router.success import load_success_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = [m for m, _ in args.tier]
    try:
        prices = [float(p) for _, p in args.tier]
        model = load_success_model(args.model)
        if model.encoder is None:
            raise RouterArtifactError("success predictor records no encoder")
        encoder = Encoder.load(layers=model.encoder.layers)
        model.check_encoder(encoder.identity)
        rows, dropped = rows_with_models(load_rows(args.data), names)
        texts = row_texts(rows)
        emb = embed_texts(encoder, texts, model.max_tokens, cache_dir=DEFAULT_CACHE_DIR)
        columns = [model.index(resolve(m, model.models)[0]) for m in names]
        p = model.predict(emb, texts)[:, columns]
        report = tier_report(p, tier_outcomes(rows, names).score, names, prices, args.budget)
    except (RoutingDataError, RouterArtifactError, ValueError, KeyError) as exc:
        return _error(exc)
    print(
        f"{len(rows)} rows ({dropped} lacked a tier); prices per call {dict(zip(names, prices, strict=True))}"
    )
    for m, (c, q) in report.single.items():
        print(f"  {m} only: cost {c:.3f}, quality {q:.4f}")
    print(f"  oracle: cost {report.oracle[0]:.3f}, quality {report.oracle[1]:.4f}")
    print(f"share of {names[-1]} quality at {report.budget:.0%} of its cost:")
    for k, v in report.at_budget.items():
        print(f"  {k}: {v:.4f}")
    from eval.routing.success_eval import median_call_us
    from router.artifact import load_artifact

    head = load_artifact().head
    cost = median_call_us(
        {
            "success predictor (all models)": model.predict,
            "difficulty head (shipped default)": head.difficulty,
        },
        emb,
        texts,
    )
    for k, v in cost.items():
        print(f"  per-request scoring after the encoder, {k}: median {v:.1f} us")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        out = {
            "data": str(args.data),
            "rows": len(rows),
            "tiers": dict(zip(names, prices, strict=True)),
            "single": report.single,
            "oracle": report.oracle,
            "at_budget": report.at_budget,
            "policy": report.policy,
            "two_tier": report.two_tier,
            "scoring_us_median": cost,
            "model": str(args.model or "shipped"),
        }
        (args.out / "tiers.json").write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out / 'tiers.json'} and {plot_tiers(report, args.out / 'tiers.png')}")
    return 0
