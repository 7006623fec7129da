"""Redaction of PII and secrets from text before it is written anywhere (the request log).

Replaces, in this order (secrets first, so a key's digits are not half-taken by the phone rule):
bearer tokens and JWTs, API keys (`sk-...`, `sk-proj-...`, `AKIA...`, `ghp_...`, `xox?-...`, and
`key=value` pairs whose key says api_key/secret/token/password), e-mail addresses, payment card
numbers (13-19 digits, spaces or dashes allowed, Luhn-valid: other long numbers are left alone), and
phone numbers (international `+CC ...` and North-American forms, and any run of 9 or more digits
with the usual separators).

Precision is traded for recall on purpose: a redacted order number costs a little log detail, a
leaked card number costs a lot. Patterns are compiled once (module constants: immutable).
"""

from __future__ import annotations

import re

_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")
_KEYS = re.compile(
    r"\b(?:sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{30,})"
)
_ASSIGNED = re.compile(
    r"(?i)\b((?:api[_-]?key|secret|token|password|passwd|pwd)\s*[:=]\s*)[\"']?[^\s\"',;]{6,}"
)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]?\d{2,4}){2,4}(?!\d)"
)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}[./-]\d{2}[./-]\d{4}")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "[CARD]" if 13 <= len(digits) <= 19 and _luhn(digits) else m.group(0)


def _phone(m: re.Match[str]) -> str:
    text = m.group(0)
    if _DATE.fullmatch(text):
        return text
    digits = sum(c.isdigit() for c in text)
    # Short groups are dates, versions and prices, not phone numbers.
    if digits >= 9 or (digits >= 7 and (text.startswith(("+", "(")) or re.search(r"\d[\s.-]\d", text))):
        return "[PHONE]"
    return text


def redact(text: str) -> str:
    """`text` with secrets and personal data replaced by [SECRET], [EMAIL], [CARD], [PHONE]."""
    text = _BEARER.sub("Bearer [SECRET]", text)
    text = _JWT.sub("[SECRET]", text)
    text = _KEYS.sub("[SECRET]", text)
    text = _ASSIGNED.sub(lambda m: m.group(1) + "[SECRET]", text)
    text = _EMAIL.sub("[EMAIL]", text)
    text = _CARD.sub(_card, text)
    return _PHONE.sub(_phone, text)
