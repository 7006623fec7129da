"""`llmgw sim`: run one simulated vLLM replica.

Settings come from a profile (a built-in name or a YAML file, see `profile.py`); flags override single
profile fields. Server identity (`--served-model-name`, `--api-key`, replay) is flag-only, with vLLM's
spellings so a chart or test can swap a real replica for the simulator. So are LoRA's (`--enable-lora`,
`--lora-modules`, `--max-loras`, `--max-lora-rank`, env `VLLM_ALLOW_RUNTIME_LORA_UPDATING`), plus the
simulator's `--lora-swap-ms` (`lora.py`, `adapters.py`), and `--reasoning-parser` plus the simulator's
`--tool-call-rate` for agent loops (`agent.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# flag dest -> profile field, for flags that override the profile when given.
_PROFILE_FLAGS = {
    "seed": "seed",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "kv_capacity_tokens": "kv_capacity_tokens",
    "block_size": "block_size",
    "max_model_len": "max_model_len",
    "step_base_ms": "step_base_ms",
    "prefill_per_token_ms": "prefill_per_token_ms",
    "decode_per_seq_ms": "decode_per_seq_ms",
    "decode_per_kv_token_ms": "decode_per_kv_token_ms",
    "output_len_mean": "output_len_mean",
    "output_len_sigma": "output_len_sigma",
    "embedding_dim": "embedding_dim",
    "enable_prefix_caching": "enable_prefix_caching",
}


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Run a vLLM-compatible simulated replica (OpenAI API, /metrics, /health, /load)."
    # vLLM binds every interface by default; matching it lets a chart swap the image without new flags.
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=["sim"],
        metavar="NAME",
        help="accepted model names; the first is echoed in responses and is the model_name metric label",
    )
    parser.add_argument("--profile", help="built-in profile (instant, small, large) or a YAML file")
    parser.add_argument("--seed", type=int, help="server RNG seed (answers to requests without a seed)")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int, help="prefill tokens per step")
    parser.add_argument("--kv-capacity-tokens", type=int, help="KV cache size in tokens")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--step-base-ms", type=float, help="fixed cost of one engine step")
    parser.add_argument("--prefill-per-token-ms", type=float, help="cost per uncached prompt token")
    parser.add_argument("--decode-per-seq-ms", type=float, help="cost per sequence in a decode step")
    parser.add_argument(
        "--decode-per-kv-token-ms", type=float, help="cost per KV token read in a decode step"
    )
    parser.add_argument("--output-len-mean", type=float, help="mean sampled answer length in tokens")
    parser.add_argument("--output-len-sigma", type=float, help="log-normal sigma of the answer length")
    parser.add_argument("--embedding-dim", type=int)
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="prefix caching (default on, like vLLM V1)",
    )
    parser.add_argument(
        "--speculative-config",
        metavar="JSON",
        help="speculative decoding, vLLM's flag: method and num_speculative_tokens are read",
    )
    parser.add_argument(
        "--spec-acceptance", type=float, help="per-token draft acceptance probability (default 0.78)"
    )
    parser.add_argument(
        "--api-key", nargs="+", metavar="KEY", help="require 'Authorization: Bearer KEY' on /v1/*"
    )
    parser.add_argument(
        "--replay", metavar="DATASET.jsonl", help="answer dataset prompts with recorded responses"
    )
    parser.add_argument("--replay-model", metavar="NAME", help="whose responses --replay uses")
    parser.add_argument(
        "--legacy-metrics",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also export vllm:gpu_cache_usage_perc, as vLLM < 0.10 did (0.32 does not)",
    )
    parser.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="usage.prompt_tokens_details.cached_tokens (vLLM's flag; without it the field is null)",
    )
    _agent_flags(parser)
    _lora_flags(parser)
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    parser.set_defaults(func=run)


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    from eval.sim.agent import REASONING_PARSERS

    parser.add_argument(
        "--reasoning-parser",
        choices=sorted(REASONING_PARSERS),
        metavar="NAME",
        help="vLLM's flag (e.g. qwen3): a request that turns thinking on gets reasoning tokens first",
    )
    parser.add_argument(
        "--tool-call-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="simulator: share of requests offering tools (and no [[sim:call]] marker) that call one",
    )
    parser.add_argument(
        "--record-requests",
        metavar="FILE.jsonl",
        help="simulator: append every chat/completions request body to FILE, one JSON line each (tests)",
    )


def _lora_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (vLLM's flag)")
    parser.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="SPEC",
        help='adapters loaded at start: name=path or JSON {"name","path","base_model_name"}',
    )
    parser.add_argument("--max-loras", type=int, default=1, help="adapters in one batch (GPU slots)")
    parser.add_argument(
        "--max-lora-rank", type=int, default=16, choices=(1, 8, 16, 32, 64, 128, 256, 320, 512)
    )
    parser.add_argument(
        "--lora-swap-ms", type=float, default=30.0, help="simulator: cost of swapping an adapter into a slot"
    )
    parser.add_argument(
        "--allow-runtime-lora-updating",
        action="store_true",
        help="simulator: the load/unload routes, as env VLLM_ALLOW_RUNTIME_LORA_UPDATING=True gives",
    )


def _lora_config(args: argparse.Namespace) -> dict[str, Any]:
    """The SimConfig fields of the LoRA flags. Raises ValueError for a bad combination."""
    from eval.sim.adapters import parse_lora_modules
    from eval.sim.lora import LoraSettings

    modules = parse_lora_modules(list(args.lora_modules))
    env = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")
    if not args.enable_lora:
        if modules:
            raise ValueError("--lora-modules needs --enable-lora")
        return {"runtime_lora": env or args.allow_runtime_lora_updating}
    if args.max_loras < 1 or args.lora_swap_ms < 0:
        raise ValueError("--max-loras must be at least 1 and --lora-swap-ms not negative")
    return {
        "lora": LoraSettings(args.max_loras, args.max_lora_rank, args.lora_swap_ms),
        "lora_modules": tuple(modules),
        "runtime_lora": env or args.allow_runtime_lora_updating,
    }


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Profile fields the flags set. Raises ValueError for a malformed --speculative-config."""
    from eval.sim.speculation import from_vllm_json

    out = {
        field: getattr(args, dest)
        for dest, field in _PROFILE_FLAGS.items()
        if getattr(args, dest) is not None
    }
    if args.speculative_config:
        out["speculative"] = from_vllm_json(args.speculative_config)
    if args.spec_acceptance is not None:
        if "speculative" not in out:
            raise ValueError("--spec-acceptance needs --speculative-config")
        out["speculative"]["acceptance"] = args.spec_acceptance
    return out


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from eval.sim.profile import ProfileError, load_profile
    from eval.sim.replay import ReplayError, ReplayIndex
    from eval.sim.server import SimConfig, build_app

    try:
        profile = load_profile(args.profile, _overrides(args))
        lora = _lora_config(args)
        if not 0.0 <= args.tool_call_rate <= 1.0:
            raise ValueError(f"--tool-call-rate must be within 0..1, got {args.tool_call_rate}")
    except (ProfileError, ValueError) as exc:
        print(f"llmgw sim: {exc}", file=sys.stderr)
        return 2
    replay = None
    if args.replay:
        if not args.replay_model:
            print("llmgw sim: --replay needs --replay-model", file=sys.stderr)
            return 2
        try:
            replay = ReplayIndex.load(args.replay, args.replay_model)
        except (OSError, ReplayError) as exc:
            print(f"llmgw sim: {exc}", file=sys.stderr)
            return 2
    config = SimConfig(
        profile=profile,
        served_names=tuple(args.served_model_name),
        api_keys=tuple(args.api_key or ()),
        replay=replay,
        legacy_metrics=args.legacy_metrics,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        tool_call_rate=args.tool_call_rate,
        reasoning_parser=args.reasoning_parser,
        record_requests=args.record_requests,
        **lora,
    )
    try:
        app = build_app(config)
    except ValueError as exc:  # an adapter of --lora-modules did not load: vLLM does not start either
        print(f"llmgw sim: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=args.log_level,
        # In-flight generations could otherwise hold a SIGTERM for as long as their answers take.
        timeout_graceful_shutdown=2,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmgw sim")
    register(parser)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
