"""Redaction on a real gateway process (issue 25): the whole positive corpus of
tests/data/redaction_corpus.py sent as prompts, and not one part of a secret in the request log.

The gateway runs with `LLMGW_REQUEST_LOG=true` and `LLMGW_REQUEST_LOG_TEXT=true` in front of a
simulator; prompts go through the openai SDK: chat, chat streamed and legacy completions in turn.
The log file is the gateway's whole output, so a secret that reached any line of it (the request log
or anything else) fails the test; the response text is checked too.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
from openai.types.chat import ChatCompletionMessageParam

from gateway.tenancy.keys import generate_key, hash_key
from tests.data.redaction_corpus import Sample, leaks, positives
from tests.support.procs import free_port
from tests.support.stack import Stack


def test_no_part_of_a_corpus_secret_reaches_the_log(tmp_path: Path) -> None:
    sim_port, gw_port = free_port(), free_port()
    key = generate_key()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: small, model: m, serves: [chat, completions],
     endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 8, cap: 16}}}}
tenancy:
  keys:
    - {{id: redact, sha256: {hash_key(key)}, org: acme, app: security}}
"""
    )
    samples = positives()
    env = {"LLMGW_REQUEST_LOG": "true", "LLMGW_REQUEST_LOG_TEXT": "true"}
    with Stack(tmp_path) as s:
        s.sim("m", "--profile", "instant", port=sim_port)
        log = s.gateway(policy, port=gw_port, env=env).log
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{gw_port}/v1", api_key=key, max_retries=0)
        for i, sample in enumerate(samples):
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": sample.text}]
            if i % 3 == 0:
                client.chat.completions.create(model="small", messages=messages)
            elif i % 3 == 1:
                for _ in client.chat.completions.create(model="small", messages=messages, stream=True):
                    pass
            else:  # the legacy endpoint: the log takes the text from `prompt`
                client.completions.create(model="small", prompt=sample.text)
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith('{"ts"')]
    logged = [r for r in lines if r["status"] == 200]
    assert len(logged) == len(samples)
    # The text was logged, redacted, not dropped: every prompt is there with its markers.
    assert all("[SECRET]" in r["prompt"] or "[IBAN]" in r["prompt"] for r in logged)
    # JSON-escaped in the file: check the decoded prompts and responses as well as the raw text.
    decoded = "\n".join(f"{r['prompt']}\n{r.get('response') or ''}" for r in logged)
    leaked = {s.family: found for s in samples if (found := leaks(text, s) + leaks(decoded, s))}
    print(f"{len(samples)} prompts, {sum(len(s.secrets) for s in samples)} secrets, leaked: {leaked}")
    assert leaked == {}
    # The check would see a secret if one were there.
    raw: Sample = samples[0]
    assert leaks(raw.text, raw) == list(raw.secrets)
