"""What each benchmarked gateway is started with: our two policies, LiteLLM's config, Portkey's headers.

Pure text rendering (unit-tested in tests/unit/test_peers_configs.py); nothing here starts a process.

Every gateway serves the same upstream and the same client-facing model name where it can (`small`);
ours with routing serves the routed alias `auto` over two pools that both point at that upstream, so
the routed figure is the price of the decision (encoder + policy), not of a slower pool.
"""

from __future__ import annotations

import json
import secrets
import string

from eval.bench.overhead.client import MODEL
from eval.bench.overhead.limiter import UNREACHABLE_LIMITS, unreachable_limits

ROUTED_MODEL = "auto"


def _pool(name: str, upstream_port: int) -> str:
    return (
        f"  - name: {name}\n"
        f"    model: {MODEL}\n"
        f'    endpoints: {{static: ["http://127.0.0.1:{upstream_port}"]}}\n'
        "    timeouts: {connect_s: 2, first_token_s: 10, total_s: 30}\n"
    )


def _tenancy(key_sha256: str) -> str:
    return f"tenancy:\n  keys: [{{id: bench, sha256: {key_sha256}, org: bench, app: bench}}]\n"


def ours_policy(upstream_port: int, key_sha256: str, speculative: bool = False) -> str:
    """Ours as a platform team runs it: auth (one static key), the Redis limiter, metrics (always on).
    `speculative`: admission overlapped with the pool call (limits.speculative, docs/design/017)."""
    return (
        "pools:\n"
        + _pool(MODEL, upstream_port)
        + "models:\n"
        + f"  - {{name: {MODEL}, route: {{pool: {MODEL}}}, max_tokens: {{default: 512, cap: 4096}}}}\n"
        + unreachable_limits(speculative)  # the limiter pays admission + settlement, never refuses
        + _tenancy(key_sha256)
    )


def ours_routed_policy(upstream_port: int, key_sha256: str) -> str:
    """The same plus a routed alias (docs/design/011): the shipped difficulty model picks one of two
    pools, both over the same upstream. No cascade: a single-step plan, the default serving shape."""
    return (
        "pools:\n"
        + _pool("small", upstream_port)
        + _pool("large", upstream_port)
        + "models:\n"
        + "  - {name: small, route: {pool: small}, max_tokens: {default: 512, cap: 4096}}\n"
        + f"  - name: {ROUTED_MODEL}\n"
        + "    route:\n"
        + "      policy:\n"
        + "        tiers: [{pool: small}, {pool: large}]\n"
        + "        difficulty: {target_strong_share: 0.3}\n"
        + "    max_tokens: {default: 512, cap: 4096}\n"
        + UNREACHABLE_LIMITS  # the limiter pays admission + settlement, never refuses
        + _tenancy(key_sha256)
    )


def litellm_master_key() -> str:
    """`sk-` + 32 random characters: LiteLLM's proxy refuses to start with a weak master key."""
    alphabet = string.ascii_letters + string.digits
    return "sk-" + "".join(secrets.choice(alphabet) for _ in range(32))


def litellm_config(upstream_port: int, master_key: str) -> str:
    """LiteLLM proxy config: one model over the upstream as an OpenAI-compatible provider, no database.

    Kept as users run it (router, auth by master key, its default logging hooks), minus what a fair
    comparison must remove: no success/failure callbacks (none are configured by default either) and
    no verbose logging. JSON is valid YAML, so no YAML writer is needed.
    """
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": f"http://127.0.0.1:{upstream_port}/v1",
                    "api_key": "sk-bench-upstream",
                },
            }
        ],
        "litellm_settings": {"set_verbose": False, "callbacks": [], "drop_params": True},
        "general_settings": {"master_key": master_key},
    }
    return json.dumps(config, indent=2) + "\n"


def portkey_headers(upstream_port: int) -> tuple[tuple[str, str], ...]:
    """Portkey routes by request headers: the OpenAI provider, pointed at the upstream."""
    return (
        ("x-portkey-provider", "openai"),
        ("x-portkey-custom-host", f"http://127.0.0.1:{upstream_port}/v1"),
        ("Authorization", "Bearer sk-bench-upstream"),
    )


PROMPT = "Say hello to the benchmark."


def request_body(model: str, stream: bool, tag: str = "") -> bytes:
    """The measured request: a short chat turn, 8 tokens asked for (the static upstream always answers
    8). Unlike eval/bench/overhead's body it carries no vLLM extension (`ignore_eos`): a peer that validates
    parameters must not be measured on an error path. `tag` makes the prompt unique (see `Side.unique`)."""
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": f"{PROMPT} [{tag}]" if tag else PROMPT}],
        "max_tokens": 8,
        "temperature": 0,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def quiet_log_config() -> str:
    """A uvicorn logging config at WARNING without the access log, for LiteLLM's `--log_config`: every
    gateway runs without per-request log lines (ours at LLMGW_LOG_LEVEL=warning, Portkey prints none)."""
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": "WARNING"},
        "loggers": {
            "uvicorn": {"level": "WARNING"},
            "uvicorn.error": {"level": "WARNING"},
            "uvicorn.access": {"level": "WARNING", "propagate": False, "handlers": []},
        },
    }
    return json.dumps(config, indent=2) + "\n"
