"""Output conformance: answers to `response_format: {type: json_schema}` validated against the schema.

`schema_check(body)` turns the request's schema into a check `(text) -> bool` (the text parses as JSON
and validates, with the validator class the schema's `$schema` names, Draft 2020-12 by default), or
None when the request asks for no schema. A schema that is not a valid JSON Schema is the client's
mistake: a 400 naming `response_format.json_schema.schema`, before any pool call.

Where it applies (docs/design/025-guardrails.md):
- a direct alias whose guardrail profile sets `json_schema: pass | retry_once | error`
  (gateway/relay/_unary.py, gateway/relay/_stream.py): `pass` counts a violation and answers anyway;
  `retry_once` calls the pool once more (a stream is then buffered: called unary and replayed as SSE)
  and answers the retry if it conforms, else 502 `output_schema_violation`; `error` answers that 502 (a
  live stream ends with it as its final error event instead);
- a routed alias whose cascade has a `{kind: schema}` scorer (router/scorers.py): a violation
  escalates to the next tier (`llmgw_router_escalations_total{reason="schema_violation"}`), and the
  strongest tier's answer is final, as with every scorer.

The client's schema costs bounded CPU (gateway/guardrails/_bounded_schema.py): at most
`MAX_SCHEMA_BYTES`, its patterns compiled by RE2 (linear-time; a pattern RE2 refuses is a 400), and an
answer's validation stops at `DEADLINE_S` with a 400 `schema_too_complex` (a live stream ends with it
as its final error event).

Every outcome is counted in `llmgw_guardrail_events_total{guardrail="json_schema",action}`: passed
(a violation let through), retried, failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from jsonschema import exceptions as schema_errors
from jsonschema import validators

from gateway.errors import InvalidRequestError
from gateway.guardrails._bounded_schema import SchemaTooCostly, bounded_validator
from gateway.sse import DONE, complete_events, error_event, event_json
from router.cascade import Cascade

__all__ = ["Check", "StreamCheck", "answers_conform", "bind_schema", "schema_check"]

Check = Callable[[str], bool]
_PARAM = "response_format.json_schema.schema"
MAX_SCHEMA_BYTES = 128 * 1024  # the schema, serialized: its meta-schema check is linear in it
DEADLINE_S = 0.025  # one answer's validation: the event loop waits at most about this long


def schema_check(body: dict[str, Any]) -> Check | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise InvalidRequestError(
            "response_format.json_schema.schema must be a JSON Schema object",
            param=_PARAM,
            code="invalid_type",
        )
    size = len(orjson.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise InvalidRequestError(
            f"response_format.json_schema.schema is {size} bytes (at most {MAX_SCHEMA_BYTES})",
            param=_PARAM,
            code="schema_too_complex",
        )
    remote = _remote_ref(schema)
    if remote is not None:
        # The gateway never fetches schemas: a reference it cannot resolve would fail at validation.
        raise InvalidRequestError(
            f"response_format.json_schema.schema: only local $ref ('#...') are supported, got {remote!r}",
            param=_PARAM,
            code="invalid_value",
        )
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        raise InvalidRequestError(
            f"response_format.json_schema.schema is not a valid JSON Schema: {exc.message}",
            param=_PARAM,
            code="invalid_value",
        ) from None
    validator = bounded_validator(schema, cls, DEADLINE_S)  # a 400 for a pattern RE2 refuses

    def conforms(text: str) -> bool:
        try:
            return validator.is_valid(orjson.loads(text))
        except orjson.JSONDecodeError:
            return False
        except SchemaTooCostly:
            raise  # the client's 400, in its API's shape
        except Exception:  # a schema jsonschema accepted but cannot apply: no answer conforms to it
            return False

    return conforms


def _remote_ref(node: Any) -> str | None:
    """The first `$ref` that is not a local JSON pointer (bodies nest at most max_json_depth)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return ref
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _remote_ref(child)
        if found is not None:
            return found
    return None


def answers_conform(parsed: dict[str, Any], check: Check) -> bool:
    """Whether every choice's message content of a chat completion conforms (a choice without text,
    e.g. only tool calls, has nothing to check)."""
    for choice in parsed.get("choices") or ():
        msg = choice.get("message") if isinstance(choice, dict) else None
        text = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(text, str) and not check(text):
            return False
    return True


def bind_schema(cascade: Cascade, body: dict[str, Any]) -> Cascade:
    """A routed request's cascade with its schema scorers bound to the request's schema."""
    return cascade.with_schema(schema_check(body)) if cascade.checks_schema else cascade


class StreamCheck:
    """A live stream's conformance, checked at its end: fed the relayed bytes, it collects each choice's
    content deltas and, on the [DONE] event, either lets it through or replaces it with `failure`'s
    error event (and [DONE]). Events split across reads are reassembled (only complete events are
    parsed)."""

    __slots__ = ("_check", "_failure", "_texts", "_partial", "violated")

    def __init__(self, check: Check, failure: bytes | None) -> None:
        self._check = check
        self._failure = failure  # the error body to end a violating stream with; None: let it through
        self._texts: dict[int, list[str]] = {}
        self._partial = b""
        self.violated: bool | None = None  # None until the stream's end is seen

    @property
    def fails(self) -> bool:
        """Whether a violation ends the stream with an error event (`error`), not just a count."""
        return self._failure is not None

    def feed(self, out: bytes) -> bytes:
        # The relayed bytes keep the pool's framing (CRLF, CR or LF; `data:` with or without a space).
        events, self._partial = complete_events(self._partial + out)
        for event in events:
            parsed = event_json(event)
            if parsed is not None:
                self._collect(parsed)
        if not out.endswith(DONE):
            return out
        try:
            self.violated = not all(self._check("".join(parts)) for parts in self._texts.values())
        except SchemaTooCostly as e:  # the stream ends with the client's 400 as its error event
            self.violated = True
            return out[: -len(DONE)] + error_event(e.body())
        if self.violated and self._failure is not None:
            return out[: -len(DONE)] + error_event(self._failure)
        return out

    def _collect(self, event: dict[str, Any]) -> None:
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else ():  # a pool's odd event is no choice
            delta = choice.get("delta") if isinstance(choice, dict) else None
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str):
                index = choice.get("index")
                self._texts.setdefault(index if type(index) is int else 0, []).append(text)
