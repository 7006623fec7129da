"""The input guardrails' detectors, one per category a policy sets a mode for.

Each is a pair of pure functions over one piece of text: `find(text, untrusted) -> bool` and
`redact(text, untrusted) -> str` (the text with what it found replaced or removed). `untrusted` is
True for tool / function results (retrieved documents, web pages, e-mails), which some rules read more
strictly (gateway/guardrails/injection.py). Secrets and personal data are the request log's own
redaction detectors (gateway/observability/redact.py), split by category: one set of regexes,
whatever the text is protected for (a bare digit run is a phone number here only after a phone word:
the log may over-redact "Is 1000000007 prime?", a guardrail must not refuse it).

    secrets         API keys, tokens, JWTs, private keys, passwords, credentials in URLs
    pii             e-mail addresses, phone, payment card and IBAN numbers
    injection       "ignore previous instructions" and its kin, instructions to the model in content
    hidden_unicode  tag characters, bidi overrides, zero-width runs (gateway/guardrails/hidden.py)
    exfiltration    URLs that would carry secrets or conversation data away
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.guardrails.exfiltration import exfiltration_spans, find_exfiltration, remove_exfiltration
from gateway.guardrails.hidden import find_hidden, strip_hidden
from gateway.guardrails.injection import find_injection, injection_spans, remove_injection
from gateway.observability.redact import GUARD_PII_STEPS, SECRET_STEPS, scrub, step_spans

__all__ = ["CATEGORIES", "DETECTORS", "Detector"]


Spans = Callable[[str, bool], list[tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    find: Callable[[str, bool], bool]
    redact: Callable[[str, bool], str]
    what: str  # the category as a client reads it in a refusal (never the matched text)
    # What it finds, as spans, in a request's folded and joined views (gateway/guardrails/normalize.py);
    # `tight`: read only in the view joined with nothing (a secret split across parts), else first in
    # the views joined with spaces, then in that one (a word split mid-way across parts).
    # None: the detector reads only the texts as they are (hidden characters: the views drop them).
    spans: Spans | None = None
    tight: bool = False


def _secrets(text: str, untrusted: bool) -> str:
    return scrub(text, SECRET_STEPS)


def _pii(text: str, untrusted: bool) -> str:
    return scrub(text, GUARD_PII_STEPS)


DETECTORS: tuple[Detector, ...] = (
    Detector(
        "secrets",
        lambda t, u: _secrets(t, u) != t,
        _secrets,
        "a secret (API key, token, password or key)",
        lambda t, u: step_spans(t, SECRET_STEPS),
        tight=True,
    ),
    Detector(
        "pii",
        lambda t, u: _pii(t, u) != t,
        _pii,
        "personal data (e-mail, phone, card or IBAN number)",
        lambda t, u: step_spans(t, GUARD_PII_STEPS),
        tight=True,
    ),
    Detector(
        "injection",
        find_injection,
        remove_injection,
        "a prompt injection (instructions to the model)",
        injection_spans,
    ),
    Detector(
        "hidden_unicode", lambda t, u: find_hidden(t), lambda t, u: strip_hidden(t), "hidden characters"
    ),
    Detector(
        "exfiltration",
        lambda t, u: find_exfiltration(t),
        lambda t, u: remove_exfiltration(t),
        "a data-exfiltration URL",
        exfiltration_spans,
    ),
)
CATEGORIES: tuple[str, ...] = tuple(d.name for d in DETECTORS)
