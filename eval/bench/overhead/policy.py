"""The spine gateway's policy: one pool over the upstream and its alias, no auth, no limits."""

from __future__ import annotations

from pathlib import Path

from eval.bench.overhead.client import MODEL


def pool_and_model_yaml(upstream_port: int) -> str:
    """One pool over the upstream and its alias: what every benchmarked gateway serves."""
    return (
        "pools:\n"
        f"  - name: {MODEL}\n"
        f"    model: {MODEL}\n"
        f'    endpoints: {{static: ["http://127.0.0.1:{upstream_port}"]}}\n'
        "    timeouts: {connect_s: 2, first_token_s: 10, total_s: 30}\n"
        "models:\n"
        f"  - {{name: {MODEL}, route: {{pool: {MODEL}}}, max_tokens: {{default: 512, cap: 4096}}}}\n"
    )


# `--guardrails`: every input guardrail on for the anonymous tier (docs/design/025): each detector in
# redact mode (the full scan, and a rewrite when it finds something: the bench prompt has nothing to
# find, as most traffic), a prompt size limit and an allowed-tools list.
GUARDRAILS_YAML = """\
guardrails:
  profiles:
    all:
      secrets: redact
      pii: redact
      injection: redact
      hidden_unicode: redact
      exfiltration: redact
      max_prompt_chars: 100000
      allowed_tools: [get_weather]
  tiers: {standard: all}
"""


def write_policy(path: Path, upstream_port: int, guardrails: bool = False) -> None:
    """The spine gateway's policy: one pool over the upstream, no auth, no limits (with `guardrails`,
    every input guardrail on)."""
    # No auth (it is on by default), hence the anonymous tenant with no limits: the in-memory
    # limiter with zero rules.
    extra = GUARDRAILS_YAML if guardrails else ""
    path.write_text(pool_and_model_yaml(upstream_port) + "tenancy: {auth: disabled}\n" + extra)
