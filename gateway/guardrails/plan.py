"""What one request is held to: the guardrail profiles of its alias and tier, merged, tightened by its
key's entry (gateway/config_guardrails.py says how), resolved once at start-up into a table.

`GuardTable.lookup(alias, tier, key_id)` is the hot path's only cost when no guardrail applies: one
dict lookup (and one more when some key has an entry), returning None.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.config import Policy
from gateway.config_guardrails import GuardProfile, KeyGuard, Mode, SchemaPolicy
from gateway.guardrails.detectors import DETECTORS, Detector

__all__ = ["GuardPlan", "GuardTable"]

_STRICTNESS: dict[Mode, int] = {"off": 0, "log": 1, "redact": 2, "block": 3}


@dataclass(frozen=True, slots=True)
class GuardPlan:
    detectors: tuple[tuple[Detector, Mode], ...] = ()  # the categories not off, in DETECTORS order
    max_prompt_chars: int | None = None
    allowed_tools: frozenset[str] | None = None
    json_schema: SchemaPolicy | None = None

    @property
    def checks_input(self) -> bool:
        return bool(self.detectors) or self.max_prompt_chars is not None or self.allowed_tools is not None

    def tightened(self, key: KeyGuard) -> GuardPlan:
        return replace(
            self,
            max_prompt_chars=_smaller(self.max_prompt_chars, key.max_prompt_chars),
            allowed_tools=_both(self.allowed_tools, key.allowed_tools),
        )


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _both(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    return b if a is None else a if b is None else a & b


def merge(alias: GuardProfile | None, tier: GuardProfile | None) -> GuardPlan | None:
    """The stricter of the two per category; None when neither asks for anything."""
    profiles = [p for p in (alias, tier) if p is not None]
    if not profiles:
        return None
    detectors: list[tuple[Detector, Mode]] = []
    for d in DETECTORS:
        mode: Mode = max((getattr(p, d.name) for p in profiles), key=_STRICTNESS.__getitem__)
        if mode != "off":
            detectors.append((d, mode))
    size: int | None = None
    tools: frozenset[str] | None = None
    for p in profiles:
        size = _smaller(size, p.max_prompt_chars)
        tools = _both(tools, p.allowed_tools)
    schema = alias.json_schema if alias is not None else tier.json_schema if tier is not None else None
    plan = GuardPlan(tuple(detectors), size, tools, schema)
    return plan if plan.checks_input or plan.json_schema is not None else None


class GuardTable:
    def __init__(self, policy: Policy) -> None:
        g = policy.guardrails
        tiers = set(policy.limits.tiers) | set(g.tiers)
        self._plans: dict[tuple[str, str], GuardPlan] = {}
        for m in policy.models:
            alias = g.profiles[m.guardrails] if m.guardrails is not None else None
            for tier in tiers:
                name = g.tiers.get(tier)
                plan = merge(alias, g.profiles[name] if name is not None else None)
                if plan is not None:
                    self._plans[(m.name, tier)] = plan
        self._keys = dict(g.keys)
        self._empty = GuardPlan()

    @property
    def active(self) -> bool:
        """Whether any request can be held to anything (False: the relay skips the stage)."""
        return bool(self._plans or self._keys)

    def lookup(self, alias: str, tier: str, key_id: str) -> GuardPlan | None:
        plan = self._plans.get((alias, tier))
        if self._keys:
            key = self._keys.get(key_id)
            if key is not None:
                return (plan or self._empty).tightened(key)
        return plan
