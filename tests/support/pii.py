"""A seeded corpus of prompts carrying PII and secrets, and the check that none survives in a text."""

from __future__ import annotations

import random
import re
import string

TEMPLATES = [
    "Hi, I'm {name}. Email me at {email} or call {phone}.",
    "My card is {card}, expiry 09/29. Please charge it.",
    "Use this key: {key} (don't share). Also my phone: {phone}",
    "curl -H 'Authorization: Bearer {bearer}' https://api.example.com/v1",
    "Contact: {email}; backup {email2}; mobile {phone}; card {card}",
    "config: api_key={secret} password: {secret2}",
    "The token {key} belongs to {email}, paid with {card}.",
]
NAMES = ["Ada", "Grace", "Linus", "Margaret", "Dennis"]
DOMAINS = ["corp.example.com", "mail.example.org", "x.io"]


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    digits = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return digits + str((10 - total % 10) % 10)


def _card(rng: random.Random) -> str:
    prefix, length = rng.choice([("4", 16), ("51", 16), ("37", 15), ("6011", 16)])
    n = _luhn_complete(prefix, length, rng)
    sep = rng.choice(["", " ", "-"])
    if length == 15:
        return sep.join((n[:4], n[4:10], n[10:]))
    return sep.join(n[i : i + 4] for i in range(0, 16, 4))


def _phone(rng: random.Random) -> str:
    d = lambda k: "".join(rng.choice(string.digits) for _ in range(k))  # noqa: E731
    return rng.choice(
        [
            f"+1 ({d(3)}) {d(3)}-{d(4)}",
            f"{d(3)}.{d(3)}.{d(4)}",
            f"+44 20 {d(4)} {d(4)}",
            f"+49 30 {d(6)}",
            f"0{d(1)} {d(2)} {d(2)} {d(2)} {d(2)}",
            f"({d(3)}) {d(3)}-{d(4)}",
            d(10),
        ]
    )


def _token(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(k))


def corpus(seed: int = 7, n: int = 40) -> tuple[list[str], list[str]]:
    """(prompts, secrets): every secret appears verbatim in some prompt."""
    rng = random.Random(seed)
    prompts: list[str] = []
    secrets: list[str] = []
    for i in range(n):
        values = {
            "name": rng.choice(NAMES),
            "email": f"{rng.choice(NAMES).lower()}.{_token(rng, 5).lower()}@{rng.choice(DOMAINS)}",
            "email2": f"{_token(rng, 6).lower()}+tag@example.co.uk",
            "phone": _phone(rng),
            "card": _card(rng),
            "key": rng.choice(["sk-", "sk-proj-", "sk-ant-"]) + _token(rng, 32),
            "bearer": _token(rng, 40),
            "secret": _token(rng, 20),
            "secret2": _token(rng, 14),
        }
        template = TEMPLATES[i % len(TEMPLATES)]
        prompts.append(template.format(**values))
        secrets += [values[k] for k in values if "{" + k + "}" in template and k != "name"]
    return prompts, secrets


def leaked(text: str, secrets: list[str]) -> list[str]:
    """Secrets found in `text`, verbatim or (numbers) as their digits with any separators."""
    found = [s for s in secrets if s in text]
    digits_only = re.sub(r"\D", "", text)
    for s in secrets:
        d = re.sub(r"\D", "", s)
        if len(d) >= 9 and d == re.sub(r"[\s().+-]", "", s).lstrip("+") and d in digits_only:
            found.append(s)
    return found
