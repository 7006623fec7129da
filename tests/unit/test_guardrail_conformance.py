"""Output conformance in process: the request's schema check, the stream judge, the cascade's schema
scorer (a violation escalates; the last tier is final)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.guardrails.conformance import StreamCheck, answers_conform, bind_schema, schema_check
from router.cascade import Accept, Cascade, Escalate
from router.config import Cascade as CascadeConfig
from router.plan import Answer, Call, EscalationReason, Plan, Step

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}


def _body(schema: Any = SCHEMA) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}


def test_schema_check_validates_answers_and_refuses_bad_schemas() -> None:
    check = schema_check(_body())
    assert check is not None
    assert check('{"city": "Oslo", "temp": 3}')
    assert not check('{"city": "Oslo"}')  # required
    assert not check('{"city": "Oslo", "temp": "3"}')  # type
    assert not check("Sure! Here is the JSON: {...}")  # not JSON at all
    assert schema_check({}) is None and schema_check({"response_format": {"type": "json_object"}}) is None
    with pytest.raises(InvalidRequestError) as exc:
        schema_check(_body({"type": "objekt"}))
    assert exc.value.param == "response_format.json_schema.schema" and exc.value.status == 400
    with pytest.raises(InvalidRequestError):
        schema_check({"response_format": {"type": "json_schema", "json_schema": {"name": "w"}}})


def test_remote_refs_are_refused_and_broken_local_refs_never_raise() -> None:
    with pytest.raises(InvalidRequestError, match="only local"):
        schema_check(_body({"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}}))
    check = schema_check(_body({"$ref": "#/$defs/missing"}))
    assert check is not None and check('{"a": 1}') is False  # unresolvable at validation: no 500


def test_every_choice_must_conform() -> None:
    check = schema_check(_body())
    assert check is not None
    good = {"message": {"content": '{"city": "a", "temp": 1}'}}
    bad = {"message": {"content": "{}"}}
    tools_only = {"message": {"content": None, "tool_calls": [{"id": "x"}]}}
    assert answers_conform({"choices": [good, tools_only]}, check)
    assert not answers_conform({"choices": [good, bad]}, check)


def _sse(*contents: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": c}}]} for c in contents]
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_stream_check_ends_a_violating_stream_with_an_error_event() -> None:
    check = schema_check(_body())
    assert check is not None
    raw = _sse('{"city": ', '"Oslo", "temp": 3}')
    judge = StreamCheck(check, b'{"error": {"message": "x"}}')
    # Fed in arbitrary pieces (events split across reads): a conforming stream passes untouched.
    out = judge.feed(raw[:17]) + judge.feed(raw[17:40]) + judge.feed(raw[40:])
    assert out == raw and judge.violated is False
    judge = StreamCheck(check, b'{"error": {"message": "x"}}')
    bad = judge.feed(_sse('{"city": "Oslo"}'))
    assert judge.violated is True and judge.fails
    assert bad.endswith(b'data: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n')
    counted_only = StreamCheck(check, None)
    assert counted_only.feed(_sse("nope")) == _sse("nope") and counted_only.violated is True


def test_schema_scorer_escalates_a_violation_and_accepts_the_last_tier() -> None:
    config = CascadeConfig.model_validate({"scorers": [{"kind": "schema"}], "max_escalations": 1})
    cascade = Cascade.from_config(config)
    assert cascade.checks_schema
    plan = Plan(steps=(Step((Call(0),)), Step((Call(1),))), cascade=True, start_tier=0)
    state, _ = cascade.start(plan)
    bound = bind_schema(cascade, _body())
    cheap = Answer(Call(0), "not json")
    decision = bound.judge(plan, state, "weather?", [cheap])
    assert isinstance(decision, Escalate) and decision.reason is EscalationReason.SCHEMA_VIOLATION
    strong = Answer(Call(1), '{"city": "Oslo", "temp": 3}')
    final = bound.judge(plan, decision.state, "weather?", [strong])
    assert isinstance(final, Accept) and final.tier == 1
    # A request without a schema: the scorer accepts every answer (the cheap tier answers).
    unbound = bind_schema(cascade, {})
    assert isinstance(unbound.judge(plan, state, "weather?", [cheap]), Accept)


@pytest.mark.parametrize("sep", [b"\r\n\r\n", b"\r\r", b"\n\n"])
@pytest.mark.parametrize("space", [b" ", b""])
def test_stream_check_reads_every_sse_framing(sep: bytes, space: bytes) -> None:
    # A pool's framing is relayed as it came (gateway.sse): the check must read it all.
    check = schema_check(_body())
    assert check is not None
    events = [{"choices": [{"index": 0, "delta": {"content": c}}]} for c in ('{"city": ', '"Oslo"}')]
    raw = b"".join(b"data:" + space + orjson.dumps(e) + sep for e in events)
    judge = StreamCheck(check, b'{"error": {"message": "x"}}')
    out = judge.feed(raw[:9]) + judge.feed(raw[9:]) + judge.feed(b"data: [DONE]\n\n")
    assert judge.violated is True  # "temp" is required: the collected content was checked
    assert out.endswith(b'data: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n')


def test_stream_check_ignores_odd_choices_from_a_pool() -> None:
    check = schema_check(_body())
    assert check is not None
    odd = [{"choices": 5}, {"choices": [{"index": "x", "delta": {"content": '{"city": "a", "temp": 1}'}}]}]
    raw = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in odd) + b"data: [DONE]\n\n"
    judge = StreamCheck(check, None)
    assert judge.feed(raw) == raw and judge.violated is False
