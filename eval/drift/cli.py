"""`llmgw drift --pools A B [--prompts FILE] [--max-tokens N] [--out DIR]`: do two pools still agree?

    llmgw drift --pools http://127.0.0.1:8001 http://127.0.0.1:8002 --out drift-results
    llmgw drift --config policy.yaml --pools reference quantized --max-bound-mean-abs-logprob 0.05

Writes report.json and drift.png into --out and prints the table. Exit codes: 0 compared (and within
the bounds given, if any), 1 a bound was exceeded, 2 bad input: flags, prompts file, a pool that is
unreachable, answers an error, is not a chat completion, or sends no logprobs (one line, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

from eval.drift.prompts import DEFAULT_PROMPTS, PromptsError, load_prompts
from eval.drift.report import table, write
from eval.drift.run import CheckError, CheckSettings, run_check
from eval.drift.targets import TargetError, resolve
from eval.status import Status
from pools.drift import breaches
from pools.drift_answer import MAX_TOP_LOGPROBS


def _top(text: str) -> int:
    k = int(text)
    if not 1 <= k <= MAX_TOP_LOGPROBS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_TOP_LOGPROBS} (the engines' limit), got {k}")
    return k


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Compare two pools serving the same weights on a greedy canary prompt set."
    p = parser
    p.add_argument("--pools", nargs=2, required=True, metavar=("A", "B"), help="base URLs, or pool names")
    p.add_argument("--config", help="policy YAML: resolve pool names to their static endpoint and model")
    p.add_argument("--model", nargs="+", metavar="NAME", help="model name to send (one for both, or A B)")
    p.add_argument("--prompts", type=Path, help=".txt (a prompt a line), .jsonl, .json or .yaml")
    p.add_argument("--max-tokens", type=_positive, default=32)
    p.add_argument(
        "--top-logprobs", type=_top, default=5, help=f"alternatives per token (<= {MAX_TOP_LOGPROBS})"
    )
    p.add_argument("--no-prompt-logprobs", action="store_true", help="do not ask for vLLM's prompt_logprobs")
    p.add_argument("--api-key-env", help="environment variable holding both pools' API key")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (vLLM's first is slow)")
    p.add_argument("--max-bound-mean-abs-logprob", type=float, metavar="X", help="exit 1 above this")
    p.add_argument("--max-bound-kl", type=float, metavar="X", help="exit 1 above this")
    p.add_argument("--min-bound-match-ratio", type=float, metavar="X", help="exit 1 below this")
    p.add_argument("--out", type=Path, default=Path("drift-results"), help="report directory")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    models = args.model or [None]
    if len(models) > 2:
        print("llmgw drift: --model takes one name (both pools) or two (A B)", file=sys.stderr)
        return 2
    settings = CheckSettings(args.max_tokens, args.top_logprobs, not args.no_prompt_logprobs)
    try:
        prompts = load_prompts(args.prompts) if args.prompts else list(DEFAULT_PROMPTS)
        with httpx.Client(timeout=args.timeout) as client:
            a, b = (
                resolve(spec, client, args.config, models[min(i, len(models) - 1)], args.api_key_env)
                for i, spec in enumerate(args.pools)
            )
            with Status("llmgw drift") as status:
                status.phase(f"{len(prompts)} canary prompts to both pools")
                check = run_check(client, a, b, prompts, settings)
    except (PromptsError, TargetError, CheckError) as exc:
        print(f"llmgw drift: {exc}", file=sys.stderr)
        return 2
    try:
        write(check, a, b, settings, args.out)
    except OSError as exc:
        print(f"llmgw drift: cannot write the report to {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(table(check))
    print(f"report: {args.out / 'report.json'}, plot: {args.out / 'drift.png'}")
    over = breaches(
        check.summary, args.max_bound_mean_abs_logprob, args.max_bound_kl, args.min_bound_match_ratio
    )
    if over:
        print(f"llmgw drift: outside the bounds: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0
