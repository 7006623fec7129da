"""Guardrail policy: which input detectors act, how, and on whom (docs/design/025-guardrails.md).

    guardrails:
      profiles:
        strict:
          secrets: redact          # off | log | redact | block, per detector category
          pii: redact
          injection: block
          hidden_unicode: redact
          exfiltration: block
          max_prompt_chars: 200000 # characters of message / prompt text
          allowed_tools: [get_weather, search]   # absent: any tool
          json_schema: retry_once  # response_format json_schema answers: pass | retry_once | error
      tiers: {standard: strict}    # every request of a key of this tier
      keys:                        # per key id: tighter size and tool limits
        ci-bot: {max_prompt_chars: 20000, allowed_tools: []}
    models:
      - {name: small, route: {pool: small}, guardrails: strict}

A request is held to its alias's profile and its tenant tier's profile at once: for each category the
stricter mode (block > redact > log > off), the smaller size limit, the tools both allow; its key's
entry tightens size and tools further. Neither an alias owner nor a tenant can loosen the other's
rules. `json_schema` is the alias's when its profile is set (it describes the model's output), else
the tier's. Output conformance on a routed alias is a cascade scorer (`kind: schema`), not this field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GuardProfile", "Guardrails", "KeyGuard", "Mode", "SchemaPolicy", "guard_references"]

Mode = Literal["off", "log", "redact", "block"]
SchemaPolicy = Literal["pass", "retry_once", "error"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GuardProfile(_Frozen):
    secrets: Mode = Field("off", description="API keys, tokens, passwords, private keys")
    pii: Mode = Field("off", description="e-mail addresses, phone, card and IBAN numbers")
    injection: Mode = Field(
        "off", description="prompt injection: override phrases, instructions to the model in content"
    )
    hidden_unicode: Mode = Field(
        "off", description="invisible tag characters, bidi overrides, zero-width runs (redact strips them)"
    )
    exfiltration: Mode = Field("off", description="URLs that would carry secrets or conversation data away")
    max_prompt_chars: int | None = Field(
        None, ge=1, description="larger prompts (message / prompt text, every role) are refused (413)"
    )
    allowed_tools: frozenset[str] | None = Field(
        None, description="function names a request may declare in `tools`; absent: any (empty: none)"
    )
    json_schema: SchemaPolicy | None = Field(
        None,
        description="answers to `response_format: json_schema` on a direct alias: pass (count "
        "violations), retry_once (then error), error; absent: not validated",
    )


class KeyGuard(_Frozen):
    max_prompt_chars: int | None = Field(None, ge=1, description="this key's prompt size limit")
    allowed_tools: frozenset[str] | None = Field(None, description="function names this key may declare")


class Guardrails(_Frozen):
    profiles: dict[str, GuardProfile] = Field({}, description="named guardrail profiles")
    tiers: dict[str, str] = Field({}, description="tenant tier -> profile its keys' requests are held to")
    keys: dict[str, KeyGuard] = Field({}, description="key id -> size and tool limits of that key")


Problems = list[tuple[tuple[str | int, ...], str]]


def guard_references(guard: Guardrails, aliases: list[str | None], tiers: set[str]) -> Problems:
    """Profiles named by aliases (`aliases[i]`: models[i].guardrails) and tiers exist; tiers exist."""
    problems: Problems = []
    names = sorted(guard.profiles)
    for i, name in enumerate(aliases):
        if name is not None and name not in guard.profiles:
            problems.append((("models", i, "guardrails"), f"unknown guardrail profile '{name}' ({names})"))
    for tier, name in guard.tiers.items():
        if tier not in tiers:
            problems.append(
                (("guardrails", "tiers", tier), f"unknown tier '{tier}' (tiers: {sorted(tiers)})")
            )
        if name not in guard.profiles:
            problems.append((("guardrails", "tiers", tier), f"unknown guardrail profile '{name}' ({names})"))
    return problems
