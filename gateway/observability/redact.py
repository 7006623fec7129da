"""Redaction of PII and secrets from text before it is written anywhere (the request log).

Replaces, in this order (whole blocks first, then keyed secrets, then the shapes that stand alone, so a
key's digits are not half-taken by the phone rule):
- PEM private keys, the whole `-----BEGIN ... PRIVATE KEY-----` block (RSA, EC, OPENSSH, ENCRYPTED,
  DSA, PKCS#8; also a block cut off before its END line);
- secret JSON fields (`"private_key"`, `"private_key_id"` of a GCP service account, `"client_secret"`,
  `"refresh_token"`, `"password"`...), whatever their value holds;
- `Authorization: Basic ...` credentials (and `Basic <base64>` elsewhere when it decodes to `user:pass`)
  and `scheme://user:password@` in URLs, `curl -u user:password`;
- bearer tokens and JWTs, API keys (`sk-...`, Stripe `sk_live_`/`rk_live_`/`sk_test_`/`whsec_`,
  `AKIA`/`ASIA...`, `ghp_...`, `xox?-...`, `AIza...`), AWS secret access keys next to their keyword
  (`aws_secret_access_key = ...`, `AWS_SECRET_ACCESS_KEY=`, `"SecretAccessKey": "..."`);
- `key=value` / `key: value` pairs whose key says api_key/secret/token/password/passwd/pwd/pass, and
  password phrases ("my password is ...", up to the end of the clause unless the next word says the
  phrase is about passwords, e.g. "is required"; "my PIN is" only before a digit);
- e-mail addresses; IBANs, compact or in groups of four, only when the ISO 13616 length of their
  country and the mod-97 check agree (other uppercase-digit strings are left alone); payment card
  numbers (13-19 digits, Luhn-valid); phone numbers (international `+CC ...`, North-American forms,
  and any run of 9 or more digits with the usual separators).

Precision is traded for recall on purpose: a redacted order number costs a little log detail, a
leaked card number costs a lot. Digit runs glued to letters, `-` or `/` (git SHAs, UUIDs, base64) are
not phone or card numbers. Patterns are compiled once (module constants: immutable); none nests a
quantifier over overlapping classes, and the unbounded parts scan forward once (linear in the text).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

# The body stops at the first `-----` (so each BEGIN is scanned once, whatever follows). A block cut
# off before its END line: its header lines and base64 lines (>= 16 characters, so the prose after a
# pasted half key survives), newlines real or JSON-escaped.
_PEM = re.compile(
    r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[^-]*+(?:-(?!----)[^-]*+)*+-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    r"|(?:(?:\s|\\[nr])++(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment|Version):[^\r\n\\]*))*)"
)
_FIELD_NAMES = (
    r"private[_-]?key(?:[_-]?id)?|client[_-]?secret|(?:refresh|access|session|auth)[_-]?token|api[_-]?key"
    r"|secret[_-]?access[_-]?key|secret|password|passwd"
)
_JSON_FIELD = re.compile(rf'(?i)("(?:{_FIELD_NAMES})"\s*:\s*")(?:[^"\\]|\\.)*"')
_BASIC = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)?\bbasic\s+([A-Za-z0-9+/]{4,}={0,2})")
_URL_CREDENTIALS = re.compile(r"(?<=://)[^\s/:@]{1,256}:[^\s/@]{1,256}@")
_USER_FLAG = re.compile(r"(?<!\S)((?:-u|--user)[ \t=]+[^\s:\"']{1,256}:)[^\s\"']+")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")
_KEYS = re.compile(
    r"\b(?:sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|[sr]k_(?:live|test)_[0-9A-Za-z]{10,}"
    r"|whsec_[0-9A-Za-z]{16,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{30,})"
)
_AWS_SECRET = re.compile(
    r"(?i)(secret[_\s-]?access[_\s-]?key[\"']?[ \t]{0,4}(?:[:=]|=>|\bis\b)?[ \t]{0,4}[\"']?)"
    r"[A-Za-z0-9/+=]{20,}"
)
# A value that names where a secret comes from is not one: code, templates, placeholders, nothing.
_NOT_A_VALUE = (
    r"(?![\"']?\[SECRET\]|\$|\{\{|<|(?:os|process)\.|getenv|environ|[A-Za-z_][\w.]*[(\[]"
    r"|(?:None|null|nil|true|false|undefined|\*+)(?![^\s\"',;]))"
)
_KEYWORDS = (
    r"api[_-]?key|secret(?:[_-]?key)?|client[_-]?secret|(?:access|auth|refresh|session)[_-]?token|token"
    r"|private[_-]?key(?:[_-]?id)?|password|passwd|passphrase|pwd|pass"
)
_ASSIGNED = re.compile(
    rf"(?i)(?<![A-Za-z0-9])((?:{_KEYWORDS})[\"']?[ \t]*[:=][ \t]*|--(?:{_KEYWORDS})[ \t]+)"
    rf"{_NOT_A_VALUE}(?:\"[^\"\n]{{1,200}}\"|'[^'\n]{{1,200}}'|[^\s\"',;]{{4,}})"
)
# Words after "password is" that make the phrase about passwords, not a password: the first kind
# whatever follows, the second when the clause ends there ("is correct." but "is correct-horse-7").
_ABOUT = (
    r"not|never|required|incorrect|wrong|invalid|too|missing|expired|case|reset|changed|empty|weak"
    r"|strong|optional|stored|hashed|encrypted|sent|needed|a|an|the|being|also|only|always|at|in|used"
    r"|different|unknown|protected|managed|ignored|saved|shown|hidden|your|my|our|their|his|her"
)
_ABOUT_AT_END = r"correct|set|valid|ok|okay|fine|good|bad|long|short|same|secret|private|sensitive"
_PHRASE = re.compile(
    r"(?i)\b((?:pass(?:word|phrase|code)?|pwd|pin(?:[ -]?code)?(?=\s+(?:is|was)\W{1,4}\d))"
    r"\s+(?:is|was)(?:[ \t]*+:)?\s++)"
    rf"(?!(?:{_ABOUT})(?:[\s.,;:!?-]|$)|(?:{_ABOUT_AT_END})[ \t]*(?:[.,;:!?\n]|$))"
    r"(\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'"
    r"|[^\n]{1,64}?(?=[.;,!?]?(?:\s+(?:and|but|or|so|then)\b|[.;,!?](?:\s|$)|\n|$))|\S+)"
)
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# The next three begin with a character class and check what precedes it by a lookbehind placed after
# it, so the engine skips to the candidates instead of trying the pattern at every position (2-3x).
_IBAN = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_CARD = re.compile(r"\d(?<![\w/-]\d)[ -]?(?:\d[ -]?){11,17}\d(?![\w/])")
# `+CC (area) digits`, `(area) digits` or digits, not glued to a word, `+`, `/` or `-`.
_PHONE = re.compile(
    r"[+(\d](?<![\w+/-].)"
    r"(?:(?<=\+)\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}|(?<=\()\d{1,4}\)[\s.-]?\d{2,4}|(?<=\d)\d{1,3})"
    r"(?:[\s.-]?\d{2,4}){2,4}(?![\w/])"
)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}[./-]\d{2}[./-]\d{4}")

# ISO 13616 (SWIFT's IBAN registry): the length of an IBAN per country.
_IBAN_LENGTHS = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FK", "FO", "GL", "NL", "SD"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"], 20),
    **dict.fromkeys(["CH", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "OM", "SO", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["LY", "PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "NI", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU", "YE"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
    **dict.fromkeys(["RU"], 33),
}


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """ISO 13616: the country's length, then mod 97 of the rearranged number (letters as 10-35) is 1."""
    s = text.replace(" ", "")
    if _IBAN_LENGTHS.get(s[:2]) != len(s):
        return False
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def _iban(m: re.Match[str]) -> str:
    """The country's length of the match, when valid, is an IBAN (a group after it is not part of it)."""
    text = m.group(0)
    length = _IBAN_LENGTHS.get(text[:2], 0)
    chars = [i for i, ch in enumerate(text) if ch != " "]
    if not length or len(chars) < length or not iban_valid(text[: chars[length - 1] + 1]):
        return text
    return "[IBAN]" + text[chars[length - 1] + 1 :]


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


# Words that make a bare digit run (no separator, no `+` or `(`) a phone number for the guardrails.
_PHONE_CONTEXT = (
    "phone",
    "tel",
    "call",
    "mobile",
    "cell",
    "number",
    "whatsapp",
    "sms",
    "text",
    "fax",
    "reach",
)


def _phone_in_context(m: re.Match[str]) -> str:
    """The guardrails' phone rule: a bare run of digits is a phone number only after a word that says so
    ("Is 1000000007 prime?" is math, "call 4155550132" is a number); refusing or rewriting a prompt
    costs more than a redacted log line, so here precision matters too."""
    text = m.group(0)
    if text.isdigit() and not any(
        w in m.string[max(0, m.start() - 40) : m.start()].lower() for w in _PHONE_CONTEXT
    ):
        return text
    return _phone(m)


def _basic(m: re.Match[str]) -> str:
    """After an Authorization key always; alone only when the base64 decodes to `user:password`."""
    if m.group(1) is None:
        token = m.group(2)
        try:
            decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        except (binascii.Error, ValueError):
            return m.group(0)
        if b":" not in decoded:
            return m.group(0)
    return (m.group(1) or "") + "Basic [SECRET]"


def _keep_key(m: re.Match[str]) -> str:
    return m.group(1) + "[SECRET]"


Replacement = str | Callable[[re.Match[str]], str]
Step = tuple[tuple[str, ...], re.Pattern[str], Replacement]

# (words one of which the lower-cased text must contain for the pattern to be worth a scan, or none:
# always; pattern; replacement), in the order of the module docstring. The words are a superset of
# what each pattern needs, so skipping a scan never skips a match; most prompts skip most scans.
# Split in two because the input guardrails (gateway/guardrails/) act on secrets and on personal data
# under separate modes; the request log runs both, secrets first.
SECRET_STEPS: tuple[Step, ...] = (
    (("private key",), _PEM, "[SECRET]"),
    (('"',), _JSON_FIELD, lambda m: m.group(1) + '[SECRET]"'),
    (("basic",), _BASIC, _basic),
    (("://",), _URL_CREDENTIALS, "[SECRET]@"),
    (("-u",), _USER_FLAG, _keep_key),
    (("bearer",), _BEARER, "Bearer [SECRET]"),
    (("eyj",), _JWT, "[SECRET]"),
    (("sk-", "k_live_", "k_test_", "whsec_", "akia", "asia", "gh", "xox", "aiza"), _KEYS, "[SECRET]"),
    (("access",), _AWS_SECRET, _keep_key),
    (("api", "secret", "token", "private", "pass", "pwd"), _ASSIGNED, _keep_key),
    (("pass", "pwd", "pin"), _PHRASE, _keep_key),
)
PII_STEPS: tuple[Step, ...] = (
    (("@",), _EMAIL, "[EMAIL]"),
    ((), _IBAN, _iban),
    ((), _CARD, _card),
    ((), _PHONE, _phone),
)
_STEPS = SECRET_STEPS + PII_STEPS
# The input guardrails' personal data: the same patterns, bare digit runs need a phone word before them.
GUARD_PII_STEPS: tuple[Step, ...] = (*PII_STEPS[:-1], ((), _PHONE, _phone_in_context))


def scrub(text: str, steps: tuple[Step, ...]) -> str:
    """`text` with what `steps` find replaced (a result equal to `text`: nothing found)."""
    low = text.lower()
    for words, pattern, replacement in steps:
        if not words or any(w in low for w in words):
            text = pattern.sub(replacement, text)
    return text


def step_spans(text: str, steps: tuple[Step, ...]) -> list[tuple[int, int]]:
    """The spans of `text` that `scrub(text, steps)` would rewrite (each step on the text as given)."""
    low = text.lower()
    spans: list[tuple[int, int]] = []
    for words, pattern, replacement in steps:
        if words and not any(w in low for w in words):
            continue
        for m in pattern.finditer(text):
            new = replacement(m) if callable(replacement) else replacement
            if new != m.group(0):
                spans.append(m.span())
    return spans


def redact(text: str) -> str:
    """`text` with secrets and personal data replaced by [SECRET], [EMAIL], [IBAN], [CARD], [PHONE]."""
    return scrub(text, _STEPS)
