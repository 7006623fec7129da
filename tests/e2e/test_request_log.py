"""The request log through the real gateway: one JSON line per request, seeded PII never written.

A gateway with `LLMGW_REQUEST_LOG=true` and `LLMGW_REQUEST_LOG_TEXT=true` answers a seeded corpus of
prompts full of e-mail addresses, phone and card numbers, API keys and bearer tokens (streamed and
not), sent by the openai SDK. Its whole output (the log) must contain none of them, in any spacing.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.pii import corpus, leaked
from tests.support.stack import Stack


def test_request_log_lines_carry_no_seeded_pii(tmp_path: Path) -> None:
    key = generate_key()
    prompts, secrets = corpus(seed=11, n=21)
    env = {"LLMGW_REQUEST_LOG": "true", "LLMGW_REQUEST_LOG_TEXT": "true"}
    with Stack(tmp_path) as s:
        sim = s.sim("m", "--profile", "instant")
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            f"""\
pools:
  - {{name: small, model: m, endpoints: {{static: ["{sim.url}"]}},
     price: {{input_per_mtok: 1, output_per_mtok: 2}}}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 8, cap: 16}}, slo_class: i}}
slo_classes:
  i: {{ttft_ms: 60000}}
tenancy:
  keys:
    - {{id: logkey, sha256: {hash_key(key)}, org: acme, app: support}}
"""
        )
        gw = s.gateway(policy, env=env)
        log = gw.log
        client = openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0)
        for i, prompt in enumerate(prompts):
            messages = [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": prompt},
            ]
            if i % 2:
                for _ in client.chat.completions.create(model="small", messages=messages, stream=True):
                    pass
            else:
                client.chat.completions.create(model="small", messages=messages)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=gw.v1, api_key="sk-" + "x" * 40, max_retries=0).chat.completions.create(
                model="small", messages=[{"role": "user", "content": prompts[0]}]
            )
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith('{"ts"')]
    assert len(lines) == len(prompts) + 1
    assert leaked(text, secrets) == [], "seeded PII or secrets reached the log"
    ok = [r for r in lines if r["status"] == 200]
    assert len(ok) == len(prompts)
    assert all(r["org"] == "acme" and r["app"] == "support" and r["key_id"] == "logkey" for r in ok)
    assert all(r["input_tokens"] > 0 and r["output_tokens"] > 0 and r["cost_usd"] > 0 for r in ok)
    assert all(r["ttft_ms"] is not None for r in ok if r["stream"])
    # The text was logged (redacted), not dropped.
    joined = "\n".join(r["prompt"] for r in ok)
    for marker in ("[EMAIL]", "[PHONE]", "[CARD]", "[SECRET]"):
        assert marker in joined
    [refused] = [r for r in lines if r["status"] == 401]
    assert refused["org"] is None and "[SECRET]" not in (refused.get("prompt") or "")
