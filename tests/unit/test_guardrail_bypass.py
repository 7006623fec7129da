"""Issue 39: the input guardrails see through disguises. Every case of eval/guardrails/bypass.jsonl (42:
look-alikes, fullwidth and mathematical letters, zero-widths, soft hyphens, accents, `_`, base64, hex,
tag characters, `name` fields, splits across parts and messages) is refused in block mode and leaves
nothing to find in redact mode; the texts as they are caught 5. The benign corpus stays unflagged."""

from __future__ import annotations

import pytest

from eval.guardrails.bypass_eval import benign_fp, caught, load
from gateway.edge.exchange import Kind
from gateway.guardrails.detectors import DETECTORS
from gateway.guardrails.plan import GuardPlan
from gateway.guardrails.screen import screen

CASES = load()


def test_the_corpus_has_at_least_40_cases_over_every_detector_but_hidden() -> None:
    assert len(CASES) >= 40
    assert {c["detector"] for c in CASES} == {"injection", "secrets", "pii", "exfiltration"}


@pytest.mark.parametrize("mode", ["block", "redact"])
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_disguise_is_caught(case: dict, mode: str) -> None:
    assert caught(case, mode)


def test_the_texts_as_they_are_miss_most_of_them() -> None:
    assert sum(caught(c, "block", views=False) for c in CASES) <= 10


def test_benign_rows_stay_unflagged() -> None:
    after, total = benign_fp(views=True)
    before, _ = benign_fp(views=False)
    assert total >= 100 and after <= before


def test_redaction_rewrites_only_the_disguised_span() -> None:
    zw = "\u200b"
    secret = "sk-proj-4fTq9XbL2mVn8RzK1pWd7YcE3hUa6GsJ0oNi"
    body = {"model": "m", "messages": [{"role": "user", "content": f"why does {zw.join(secret)} give 401?"}]}
    plan = GuardPlan(detectors=tuple((d, "redact") for d in DETECTORS if d.name == "secrets"))  # type: ignore[misc]
    events, refused = screen(Kind.CHAT, body, plan)
    assert refused is None and [e.action for e in events] == ["redacted"]
    assert body["messages"][0]["content"] == "why does [REDACTED] give 401?"


def test_a_secret_split_over_two_messages_is_cut_in_both() -> None:
    secret = "sk-proj-4fTq9XbL2mVn8RzK1pWd7YcE3hUa6GsJ0oNi"
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "key: " + secret[:15]},
            {"role": "user", "content": secret[15:] + " ok?"},
        ],
    }
    plan = GuardPlan(detectors=tuple((d, "redact") for d in DETECTORS if d.name == "secrets"))  # type: ignore[misc]
    screen(Kind.CHAT, body, plan)
    assert body["messages"][0]["content"] == "key: [REDACTED]"
    assert body["messages"][1]["content"] == "[REDACTED] ok?"
