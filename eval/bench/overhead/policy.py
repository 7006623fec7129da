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


# `--budgets`: dollar budgets and the spend ledger on (issue 43): the pool has a price, the anonymous
# tenant's org a day and a month budget far above what the run spends (every admission reserves and
# settles dollars; none is refused), and every request is written to the ledger (PostgreSQL, started
# by the benchmark: LLMGW_DATABASE_URL).
DOLLARS_YAML = """\
tenancy:
  auth: disabled
  orgs: [{name: anonymous, limits: {usd_per_day: 1000000, usd_per_month: 10000000}}]
"""
LEDGER_YAML = "ledger: {enabled: true}\n"
# `--before-budgets tokens`: the before side's org has a day and a month token budget instead (two quota
# rules, as the dollar side), far above what the run spends, and its pool the same price (a priced pool
# has its cost metrics with or without budgets): what dollar budgets add to a deployment that has them.
TOKENS_YAML = """\
tenancy:
  auth: disabled
  orgs: [{name: anonymous, limits: {tokens_per_day: 100000000000, tokens_per_month: 1000000000000}}]
"""
PRICE_YAML = "    price: {input_per_mtok: 0.5, output_per_mtok: 1.5}\n"


def write_policy(
    path: Path, upstream_port: int, guardrails: bool = False, budgets: str | None = None
) -> None:
    """The spine gateway's policy: one pool over the upstream, no auth, no limits (with `guardrails`,
    every input guardrail on; with `budgets`, dollar budgets and the ledger)."""
    # No auth (it is on by default), hence the anonymous tenant with no limits: the in-memory
    # limiter with zero rules.
    extra = GUARDRAILS_YAML if guardrails else ""
    pools = pool_and_model_yaml(upstream_port)
    if budgets == "tokens":
        pools = pools.replace("models:\n", PRICE_YAML + "models:\n", 1)
        path.write_text(pools + TOKENS_YAML + extra)
        return
    if budgets is not None:  # "all": dollar budgets and the ledger; "dollars" or "ledger" alone
        pools = pools.replace("models:\n", PRICE_YAML + "models:\n", 1)
        tenancy = DOLLARS_YAML if budgets in ("all", "dollars") else "tenancy: {auth: disabled}\n"
        path.write_text(pools + tenancy + (LEDGER_YAML if budgets in ("all", "ledger") else "") + extra)
        return
    path.write_text(pools + "tenancy: {auth: disabled}\n" + extra)
