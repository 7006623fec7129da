"""Data-exfiltration URLs: links that would carry secrets or conversation data to a third party.

The attack: content asks the model to render a link or image whose URL embeds data (the user's
secrets, the chat so far); a client that renders markdown fetches it, and the data is gone without a
click. A URL is flagged when
- its path, query or fragment holds a secret (the request log's secret detectors,
  gateway/observability/redact.py, run on the URL alone), or its authority holds `user:password@`;
- its query or fragment is a template for the model to fill: `{conversation}`, `{{secret}}`,
  `<password>`, `[DATA]`, `$API_KEY` naming something worth stealing;
- a markdown image (`![..](url)`, fetched by merely displaying it) carries a long opaque query value
  (>= 32 base64/hex characters): an encoded payload rather than a page;
- the text around it asks for data to be appended to or encoded into a URL or link.

Plain links, tracking parameters on ordinary links, and documentation URLs pass. `remove_urls`
replaces a flagged URL with [URL REMOVED] (the redact mode).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from gateway.guardrails._spans import replace_spans
from gateway.observability.redact import SECRET_STEPS, scrub

__all__ = ["find_exfiltration", "remove_exfiltration"]

# `<`, `>`, `[`, `]` stay in: templates (`?p=<password>`, `?q=[DATA]`) are what gives a URL away.
_URL = re.compile(r"(!\[[^\]\n]{0,200}\]\()?\bhttps?://[^\s\"'`)]+", re.IGNORECASE)
_DATA_WORDS = (
    r"secret|password|passwd|pwd|api[_ -]?key|key|token|credential|cookie|session|conversation|chat"
    r"|history|message|messages|e-?mail|data|prompt|user|memory|context|summary|ssn|card|address|name"
)
_PLACEHOLDER = re.compile(
    rf"(?i)(?:\{{\{{?|<|\[|%7B|\$\{{?)\s*[\w .-]{{0,30}}(?:{_DATA_WORDS})"
    rf"[\w .-]{{0,30}}\s*(?:\}}\}}?|>|\]|%7D)?"
    rf"|\$(?:[A-Z_]*(?:KEY|TOKEN|SECRET|PASSWORD)[A-Z_]*)"
)
_OPAQUE = re.compile(r"=[A-Za-z0-9+/_%-]{32,}={0,2}(?:&|$)")
_ERRAND = re.compile(
    r"(?i)\b(?:append|add|attach|encode|embed|include|insert|put|place|substitute|concatenate)\b"
    r"(?:[^.\n]|\.(?=\S)){0,80}\b(?:to|in|into|inside|at\s+the\s+end\s+of|as|of)\s+(?:the\s+|this\s+|a\s+|that\s+)?"
    r"(?:(?:\w+\s+)?(?:url|link|query(?:\s+string)?|image(?:\s+(?:url|link|source))?|address|parameter|href"
    r"|src)\b|https?://)"
)


def _bad(url: str, image: bool) -> bool:
    url = unquote(url)  # `Bearer%20eyJ...`, `%7Bchat%7D`: what the server would read
    if scrub(url, SECRET_STEPS) != url:
        return True
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if cut < 0:
        return False
    tail = url[cut:]
    if _PLACEHOLDER.search(tail):
        return True
    return image and _OPAQUE.search(tail) is not None


def _spans(text: str) -> list[tuple[int, int]]:
    if "://" not in text:
        return []
    found = [(m.start(), m.end()) for m in _URL.finditer(text) if _bad(m.group(0), m.group(1) is not None)]
    if not found and _ERRAND.search(text):
        found = [m.span() for m in _URL.finditer(text)]
    return found


def exfiltration_spans(text: str, untrusted: bool = False) -> list[tuple[int, int]]:
    return _spans(text)


def find_exfiltration(text: str) -> bool:
    """Whether `text` holds a URL that would carry secrets or conversation data away."""
    return bool(_spans(text))


def remove_exfiltration(text: str) -> str:
    return replace_spans(text, _spans(text), "[URL REMOVED]")
