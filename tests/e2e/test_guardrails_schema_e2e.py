"""Output conformance through the real gateway and simulators, driven by the official openai SDK.

Two simulators serve the same model: `bad` replays a recorded answer that is not JSON for the prompt
(a schema-violating answer), `good` generates JSON from the request's schema (the simulator's
structured output). Pools: `cheap` = bad, `strong` = good, `mixed` = both, round robin.
- `json-auto` (routed, cascade scorer `{kind: schema}`): the violation escalates to `strong`;
- `json-retry` (direct on `mixed`, `json_schema: retry_once`): whichever replica answers first, the
  client gets a conforming answer, and a violation is retried once (the next replica in turn);
- `json-error` (direct on `cheap`, `json_schema: error`): 502 `output_schema_violation`; a live
  stream ends with that error event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

PROMPT = "Report the weather in Oslo."
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
}
FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}


@dataclass(frozen=True)
class SchemaStack:
    gateway: str
    api_key: str

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway}/v1", api_key=self.api_key, max_retries=0)

    def metric(self, name: str, labels: str = "") -> float:
        return metric(httpx.get(f"{self.gateway}/metrics", timeout=5).text, name, labels)


@pytest.fixture(scope="module")
def schema_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaStack]:
    tmp = tmp_path_factory.mktemp("schema")
    ports = {"bad": free_port(), "good": free_port()}
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    replay = tmp / "replay.jsonl"
    replay.write_text(json.dumps({"prompt": PROMPT, "outcomes": {"rec": {"response": "Sunny, 21 degrees."}}}))
    key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: cheap, model: sim-json, endpoints: {{static: ["{url["bad"]}"]}}}}
  - {{name: strong, model: sim-json, endpoints: {{static: ["{url["good"]}"]}}}}
  - name: mixed
    model: sim-json
    endpoints: {{static: ["{url["bad"]}", "{url["good"]}"]}}
    balancing: {{strategy: round_robin}}
models:
  - name: json-auto
    route:
      policy: {{tiers: [{{pool: cheap}}, {{pool: strong}}], cascade: {{scorers: [{{kind: schema}}]}}}}
    max_tokens: {{default: 64, cap: 128}}
  - {{name: json-retry, route: {{pool: mixed}}, max_tokens: {{default: 64, cap: 128}}, guardrails: retry}}
  - {{name: json-error, route: {{pool: cheap}}, max_tokens: {{default: 64, cap: 128}}, guardrails: refuse}}
guardrails:
  profiles:
    retry: {{json_schema: retry_once}}
    refuse: {{json_schema: error}}
tenancy:
  keys:
    - {{id: schema-e2e, sha256: {hash_key(key)}, org: acme, app: e2e}}
"""
    )
    with Stack(tmp) as s:
        for name, port in ports.items():
            extra = ["--replay", str(replay), "--replay-model", "rec"] if name == "bad" else []
            s.sim("sim-json", "--profile", "instant", *extra, port=port, name=f"sim-{name}", ready=False)
        yield SchemaStack(s.gateway(policy).url, key)


def _conforms(text: str | None) -> bool:
    try:
        jsonschema.validate(json.loads(text or ""), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


MESSAGES: Any = [{"role": "user", "content": PROMPT}]


def test_routed_alias_escalates_a_schema_violation(schema_stack: SchemaStack) -> None:
    client = schema_stack.client()
    before = schema_stack.metric("llmgw_router_escalations_total", 'reason="schema_violation"')
    raw = client.chat.completions.with_raw_response.create(
        model="json-auto", messages=MESSAGES, response_format=FORMAT
    )
    resp = raw.parse()
    assert raw.headers["x-llmgw-tier"] == "strong" and raw.headers["x-llmgw-escalations"] == "1"
    assert _conforms(resp.choices[0].message.content)
    after = schema_stack.metric("llmgw_router_escalations_total", 'reason="schema_violation"')
    assert after == before + 1
    # Without a schema the same answer is acceptable: the cheap tier answers.
    plain = client.chat.completions.with_raw_response.create(model="json-auto", messages=MESSAGES)
    assert plain.headers["x-llmgw-tier"] == "cheap"
    assert plain.parse().choices[0].message.content == "Sunny, 21 degrees."


def test_fixed_alias_retries_a_violation_once(schema_stack: SchemaStack) -> None:
    client = schema_stack.client()
    before = schema_stack.metric("llmgw_guardrail_events_total", 'action="retried",guardrail="json_schema"')
    # Round robin over [bad, good]: of two requests one meets the bad replica first and is retried.
    for _ in range(2):
        resp = client.chat.completions.create(model="json-retry", messages=MESSAGES, response_format=FORMAT)
        assert _conforms(resp.choices[0].message.content)
    # Streamed: buffered, judged whole, replayed as SSE.
    for _ in range(2):
        stream = client.chat.completions.create(
            model="json-retry", messages=MESSAGES, response_format=FORMAT, stream=True
        )
        assert _conforms("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    after = schema_stack.metric("llmgw_guardrail_events_total", 'action="retried",guardrail="json_schema"')
    assert after >= before + 2
    assert schema_stack.metric("llmgw_guardrail_events_total", 'action="failed",guardrail="json_schema"') == 0


def test_error_policy_answers_502_and_ends_a_stream_with_an_error_event(schema_stack: SchemaStack) -> None:
    client = schema_stack.client()
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="json-error", messages=MESSAGES, response_format=FORMAT)
    assert exc.value.status_code == 502
    assert exc.value.body is not None and "output_schema_violation" in json.dumps(exc.value.body)
    stream = client.chat.completions.create(
        model="json-error", messages=MESSAGES, response_format=FORMAT, stream=True
    )
    with pytest.raises(openai.APIError, match="does not conform"):
        for _ in stream:
            pass
    # The same alias without a schema is not judged at all.
    plain = client.chat.completions.create(model="json-error", messages=MESSAGES)
    assert plain.choices[0].message.content == "Sunny, 21 degrees."


def test_a_schema_that_is_not_one_is_a_400(schema_stack: SchemaStack) -> None:
    bad: Any = {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "objekt"}}}
    with pytest.raises(openai.BadRequestError) as exc:
        schema_stack.client().chat.completions.create(
            model="json-error", messages=MESSAGES, response_format=bad
        )
    assert exc.value.param == "response_format.json_schema.schema"
