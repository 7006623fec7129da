"""Screening one request body against its `GuardPlan` (pure, but for `redact`, which rewrites the body
in place so the pool, the cache key and the request log all see the rewritten prompt).

What is read: every text of the request (chat message contents, string or text parts; a completion
prompt; embeddings input) for the size limit; the detectors read user turns, tool / function results
(`untrusted`: retrieved content, read with the stricter injection rules) and completion / embedding
text, but not system or developer messages (the application's own instructions) nor earlier
assistant turns. Declared `tools` are checked against the allowed names.

Order: size, then tools, then the detectors text by text in DETECTORS order. A `block` ends the screen
at once (the request is refused; nothing after it matters); `log` and `redact` are recorded as events
(`Event`: the guardrail, what it did, where) for the metrics, the request log and the trace. Events
never hold matched text. Malformed bodies are not this module's business: what it cannot read it
skips, and gateway/relay/normalize.py refuses them with a 400 afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.config_guardrails import Mode
from gateway.edge.exchange import Kind
from gateway.errors import ContentPolicyError, GatewayError, PermissionDeniedError, RequestTooLargeError
from gateway.guardrails._spans import replace_spans
from gateway.guardrails.detectors import Detector
from gateway.guardrails.normalize import View, as_is, origins, views
from gateway.guardrails.plan import GuardPlan

__all__ = ["Event", "Screened", "screen"]

_SKIPPED_ROLES = frozenset({"system", "developer", "assistant"})
_UNTRUSTED_ROLES = frozenset({"tool", "function"})
_ACTIONS: dict[Mode, str] = {"log": "logged", "redact": "redacted", "block": "blocked"}


@dataclass(frozen=True, slots=True)
class Event:
    guardrail: str
    action: str  # logged | redacted | blocked
    where: str  # the body's path of the text: messages[2].content, prompt, tools[0]


@dataclass(slots=True)
class _Text:
    holder: Any  # the dict or list that holds the text (rewritten there by redact)
    key: Any  # its key or index in `holder`
    where: str
    scanned: bool  # the detectors read it (size counts every text)
    untrusted: bool


def _content(holder: Any, key: Any, where: str, role: Any) -> Iterator[_Text]:
    c = holder.get(key)
    scanned = role not in _SKIPPED_ROLES
    untrusted = role in _UNTRUSTED_ROLES
    name = holder.get("name")
    if isinstance(name, str) and name:  # the model reads a message's name too
        yield _Text(holder, "name", where.removesuffix(".content") + ".name", scanned, untrusted)
    if isinstance(c, str):
        yield _Text(holder, key, where, scanned, untrusted)
    elif isinstance(c, list):
        for j, part in enumerate(c):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield _Text(part, "text", f"{where}[{j}].text", scanned, untrusted)


def _texts(kind: Kind, body: dict[str, Any]) -> Iterator[_Text]:
    if kind is Kind.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return
        for i, m in enumerate(messages):
            if isinstance(m, dict):
                yield from _content(m, "content", f"messages[{i}].content", m.get("role"))
        return
    field = "prompt" if kind is Kind.COMPLETIONS else "input"
    v = body.get(field)
    if isinstance(v, str):
        yield _Text(body, field, field, True, False)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            if isinstance(x, str):
                yield _Text(v, i, f"{field}[{i}]", True, False)


def _check_tools(body: dict[str, Any], allowed: frozenset[str]) -> GatewayError | None:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return None
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or name not in allowed:
            return PermissionDeniedError(
                f"tools[{i}]: this API key may not declare that tool (allowed: {sorted(allowed)})",
                param=f"tools[{i}]",
                code="tool_not_allowed",
            )
    return None


def _oversized(kind: Kind, texts: list[_Text], limit: int) -> GatewayError | None:
    size = sum(len(t.holder[t.key]) for t in texts)
    if size <= limit:
        return None
    return RequestTooLargeError(
        f"the prompt is {size} characters; this API key and model allow at most {limit}",
        param="messages" if kind is Kind.CHAT else None,
        code="prompt_too_large",
    )


Screened = tuple[list[Event], GatewayError | None]


def screen(kind: Kind, body: dict[str, Any], plan: GuardPlan) -> Screened:
    """The events of `body` under `plan` (redactions applied to `body`) and the refusal, if any: a
    `block` (400), an oversized prompt (413) or a tool the key may not use (403). A refusal is the
    last event (action `blocked`)."""
    if plan.allowed_tools is not None:
        refused = _check_tools(body, plan.allowed_tools)
        if refused is not None:
            return [Event("tools", "blocked", str(refused.param))], refused
    if plan.max_prompt_chars is None and not plan.detectors:
        return [], None  # only a tools rule: nothing reads the texts
    texts = list(_texts(kind, body))
    if plan.max_prompt_chars is not None:
        refused = _oversized(kind, texts, plan.max_prompt_chars)
        if refused is not None:
            return [Event("prompt_size", "blocked", str(refused.param or kind.value))], refused
    events: list[Event] = []
    for t in texts if plan.detectors else ():
        if not t.scanned:
            continue
        text: str = t.holder[t.key]
        for detector, mode in plan.detectors:
            if mode == "redact":
                # One pass: the rewrite differs from the text exactly when the detector finds something.
                new = detector.redact(text, t.untrusted)
                if new != text:
                    events.append(Event(detector.name, "redacted", t.where))
                    text = t.holder[t.key] = new
                continue
            if not detector.find(text, t.untrusted):
                continue
            events.append(Event(detector.name, _ACTIONS[mode], t.where))
            if mode == "block":
                return events, _refusal(detector, t.where)
    if plan.detectors:
        refused = _read_views(kind, [t for t in texts if t.scanned], plan, events)
        if refused is not None:
            return events, refused
    return events, None


def _refusal(detector: Detector, where: str) -> ContentPolicyError:
    return ContentPolicyError(
        f"the request was refused by the gateway's '{detector.name}' guardrail: {where} contains "
        f"{detector.what}",
        param=where,
    )


def _read_views(
    kind: Kind, scanned: list[_Text], plan: GuardPlan, events: list[Event]
) -> GatewayError | None:
    """The detectors over the request's folded, joined and decoded views (gateway/guardrails/normalize.py):
    what a look-alike, a zero-width space, an encoding or a split across parts hid from the texts as
    they are. A redaction found there rewrites the original texts at the spans it came from."""
    if not scanned:
        return None
    raws = [t.holder[t.key] for t in scanned]
    if as_is(raws):
        return None
    seen = views(raws)
    where = "messages" if kind is Kind.CHAT else scanned[0].where.split("[")[0]
    logged = {e.guardrail for e in events}
    for detector, mode in plan.detectors:
        if detector.spans is None or (mode != "redact" and detector.name in logged):
            continue
        tight, loose, zw = seen
        for view in (tight,) if detector.tight else (loose, zw, tight):
            if view is None:
                continue
            spans = detector.spans(view.text, False)
            if not spans:
                continue
            if mode == "redact":
                _redact_back(scanned, raws, view, spans)
                events.append(Event(detector.name, "redacted", where))
                raws = [t.holder[t.key] for t in scanned]
                seen = views(raws)
                break
            events.append(Event(detector.name, _ACTIONS[mode], where))
            if mode == "block":
                return _refusal(detector, where)
            break
    return None


def _redact_back(scanned: list[_Text], raws: list[str], view: View, spans: list[tuple[int, int]]) -> None:
    """Replace, in the original texts, the characters the view's `spans` came from."""
    origin = origins(raws, view)
    cuts: dict[int, list[tuple[int, int]]] = {}
    for s, e in spans:
        by_text: dict[int, tuple[int, int]] = {}
        for i, a, b in origin[s:e]:
            if a < b:
                lo, hi = by_text.get(i, (a, b))
                by_text[i] = (min(lo, a), max(hi, b))
        for i, span in by_text.items():
            cuts.setdefault(i, []).append(span)
    for i, found in cuts.items():
        merged: list[tuple[int, int]] = []
        for a, b in sorted(found):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        t = scanned[i]
        t.holder[t.key] = replace_spans(raws[i], merged, "[REDACTED]")
