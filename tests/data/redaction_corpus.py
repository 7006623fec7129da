"""The redaction corpus: positive samples per secret family (seeded values) and negative samples.

A positive is a realistic text (a config file, a curl line, a chat message) around one or more
generated secrets; redaction must leave no part of any of them (`leaks`). A negative is ordinary text,
code or numbers that must come out unchanged. Each redaction pattern adds its family here and the
near misses it must not take to NEGATIVES: the corpus grows with the patterns (issue 25).

Secret values are drawn from a seeded generator, so a pattern cannot be fitted to one literal; the
seed is fixed so a failure reproduces. tests/support/pii.py keeps the older PII corpus (e-mail,
phone, card, API keys, bearer tokens), which tests/unit/test_redact_reqlog.py checks.
"""

from __future__ import annotations

import base64
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

B64 = string.ascii_letters + string.digits + "+/"
ALNUM = string.ascii_letters + string.digits
# No quotes, backslashes, commas, semicolons or spaces: an unquoted value ends at those.
PASSWORD_CHARS = ALNUM + "!@#%^&*-_+=.?"


@dataclass(frozen=True)
class Sample:
    family: str
    text: str
    secrets: tuple[str, ...]


def _tok(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _aws(rng: random.Random) -> list[Sample]:
    s = [_tok(rng, B64, 40) for _ in range(6)]
    akid = "AKIA" + _tok(rng, string.ascii_uppercase + string.digits, 16)
    asia = "ASIA" + _tok(rng, string.ascii_uppercase + string.digits, 16)
    token = _tok(rng, B64, 120)
    texts = [
        (
            f"[default]\naws_access_key_id = {akid}\naws_secret_access_key = {s[0]}\nregion = eu-west-1",
            (akid, s[0]),
        ),
        (f"export AWS_SECRET_ACCESS_KEY={s[1]}\nexport AWS_REGION=us-east-1", (s[1],)),
        (
            f'{{"Credentials": {{"AccessKeyId": "{asia}", "SecretAccessKey": "{s[2]}", '
            f'"SessionToken": "{token}", "Expiration": "2026-12-02T04:00:00Z"}}}}',
            (asia, s[2], token),
        ),
        (
            f"s3 = boto3.client('s3', aws_access_key_id='{akid}', aws_secret_access_key='{s[3]}')",
            (akid, s[3]),
        ),
        (f"Here are my creds. AWS Secret Access Key: {s[4]} - why does S3 say 403?", (s[4],)),
        (f'env:\n  - name: AWS_SECRET_ACCESS_KEY\n    secret_access_key: "{s[5]}"', (s[5],)),
    ]
    return [Sample("aws-secret-access-key", t, sec) for t, sec in texts]


# (country, length, BBAN alphabet): letters where the country's BBAN has a bank code of letters.
_IBAN_FORMS = [
    ("DE", 22, "d"),
    ("FR", 27, "d"),
    ("ES", 24, "d"),
    ("IT", 27, "a"),
    ("NL", 18, "L"),
    ("GB", 22, "L"),
]


def iban(rng: random.Random, country: str, length: int, kind: str) -> str:
    """A valid IBAN: a random BBAN and the ISO 7064 mod 97-10 check digits computed for it."""
    n = length - 4
    if kind == "L":  # bank code of four letters, then digits (NL, GB)
        bban = _tok(rng, string.ascii_uppercase, 4) + _tok(rng, string.digits, n - 4)
    elif kind == "a":  # one check letter, then digits (IT, simplified)
        bban = rng.choice(string.ascii_uppercase) + _tok(rng, string.digits, n - 1)
    else:
        bban = _tok(rng, string.digits, n)
    check = 98 - int("".join(str(int(c, 36)) for c in bban + country + "00")) % 97
    return f"{country}{check:02d}{bban}"


def grouped(value: str) -> str:
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4))


def _iban(rng: random.Random) -> list[Sample]:
    out = []
    for i, form in enumerate(_IBAN_FORMS):
        value = iban(rng, *form)
        text = [
            f"Please wire the deposit to {value} by Friday.",
            f"IBAN: {grouped(value)}\nBIC: DEUTDEFFXXX",
            f"Kontoinhaber Max Mustermann, IBAN {value}, Verwendungszweck Rechnung 2026-118",
            f"pay to {value}",
            f'{{"beneficiary": "ACME BV", "iban": "{value}", "amount": 1250.00}}',
            f"Transfer from {grouped(value)} failed with code 7",
        ][i]
        out.append(Sample("iban", text, (value,)))
    # The registry's own examples, compact and grouped.
    out.append(Sample("iban", "example: DE89370400440532013000 (Germany)", ("DE89370400440532013000",)))
    out.append(
        Sample("iban", "UK one: GB29 NWBK 6016 1331 9268 19, sort code inside", ("GB29NWBK60161331926819",))
    )
    return out


def _pem_body(rng: random.Random, lines: int, width: int = 64) -> list[str]:
    return [_tok(rng, B64, width) for _ in range(lines)] + [_tok(rng, B64, rng.randint(16, 40)) + "=="]


def _pem(rng: random.Random) -> list[Sample]:
    out = []
    for label in (
        "PRIVATE KEY",
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "DSA PRIVATE KEY",
    ):
        body = _pem_body(rng, rng.randint(4, 12))
        block = f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----"
        out.append(Sample("pem", f"Why does nginx reject this key?\n{block}\nThanks!", tuple(body)))
    body = _pem_body(rng, 6, 70)
    block = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END OPENSSH PRIVATE KEY-----"
    out.append(Sample("pem", f"$ cat ~/.ssh/id_ed25519\n{block}\n$ ssh-add fails", tuple(body)))
    body = _pem_body(rng, 5)
    iv = _tok(rng, "0123456789ABCDEF", 32)
    legacy = (
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        f"DEK-Info: AES-128-CBC,{iv}\n\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    )
    out.append(Sample("pem", f"legacy key:\n{legacy}", (iv, *body)))
    # Pasted as a one-line JSON string (escaped newlines), and a block cut off before END.
    body = _pem_body(rng, 5)
    escaped = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(body) + "\\n-----END PRIVATE KEY-----\\n"
    out.append(Sample("pem", f'key = "{escaped}"', tuple(body)))
    body = [_tok(rng, B64, 64) for _ in range(5)]
    out.append(Sample("pem", "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n", tuple(body)))
    return out


def _basic(rng: random.Random) -> list[Sample]:
    out = []
    for i in range(5):
        user = rng.choice(["admin", "deploy", "ci-bot", "alice", "svc_reports"])
        password = _tok(rng, PASSWORD_CHARS, rng.randint(10, 24))
        cred = base64.b64encode(f"{user}:{password}".encode()).decode()
        text = [
            f"curl -H 'Authorization: Basic {cred}' https://jenkins.internal/api/json",
            f"GET /v1/items HTTP/1.1\nHost: api.example.com\nAuthorization: Basic {cred}\nAccept: */*",
            f"headers = {{'Authorization': 'Basic {cred}', 'Accept': 'application/json'}}",
            f'{{"authorization": "Basic {cred}"}}',
            f"the proxy wants Basic {cred} on every call",
        ][i]
        out.append(Sample("basic-auth", text, (cred,)))
    password = _tok(rng, ALNUM + "!%*-_", 14)
    out.append(Sample("basic-auth", f"curl -u deploy:{password} https://nexus.internal/repo", (password,)))
    for scheme in ("postgres", "https", "redis"):
        password = _tok(rng, ALNUM + "!%*-_", 16)
        text = f"DATABASE_URL={scheme}://app:{password}@db.internal:5432/prod"
        out.append(Sample("url-credentials", text, (password,)))
    return out


def _stripe(rng: random.Random) -> list[Sample]:
    keys = [
        f"{p}_{mode}_{_tok(rng, ALNUM, rng.randint(24, 99))}"
        for p in ("sk", "rk")
        for mode in ("live", "test")
    ]
    hook = "whsec_" + _tok(rng, ALNUM, 32)
    texts = [
        f"STRIPE_SECRET_KEY={keys[0]}",
        f'stripe.api_key = "{keys[1]}"',
        f"Use {keys[2]} in the sandbox, it is restricted",
        f"restricted test key {keys[3]} for the reports job",
        f"endpoint secret: {hook}",
    ]
    secrets = [*keys, hook]
    return [Sample("stripe", t, (sec,)) for t, sec in zip(texts, secrets, strict=True)]


def _gcp(rng: random.Random) -> list[Sample]:
    out = []
    for pretty in (True, False):
        key_id = _tok(rng, "0123456789abcdef", 40)
        body = _pem_body(rng, 8)
        pem = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(body) + "\\n-----END PRIVATE KEY-----\\n"
        fields = [
            ("type", "service_account"),
            ("project_id", "acme-prod-123"),
            ("private_key_id", key_id),
            ("private_key", pem),
            ("client_email", "reports@acme-prod-123.iam.gserviceaccount.com"),
            ("client_id", "104392817263540912873"),
            ("token_uri", "https://oauth2.googleapis.com/token"),
        ]
        sep = ",\n  " if pretty else ", "
        text = "{" + ("\n  " if pretty else "") + sep.join(f'"{k}": "{v}"' for k, v in fields) + "}"
        out.append(Sample("gcp-service-account", text, (key_id, *body)))
    key_id = _tok(rng, "0123456789abcdef", 40)
    out.append(Sample("gcp-service-account", f"private_key_id: {key_id}\nproject_id: acme", (key_id,)))
    return out


def _passwords(rng: random.Random) -> list[Sample]:
    pw = [_tok(rng, PASSWORD_CHARS, rng.randint(8, 20)) for _ in range(12)]
    pin = _tok(rng, string.digits, rng.randint(4, 8))
    words = " ".join(
        rng.choice(["correct", "horse", "battery", "staple", "orbit", "lemon"]) for _ in range(4)
    )
    texts = [
        (f"my password is {pw[0]}", pw[0]),
        (f"My password is {pw[1]}. Can you log in and fix the report?", pw[1]),
        (f"the wifi password is {pw[2]} and the network is Guest-5G", pw[2]),
        (f"password: {pw[3]}", pw[3]),
        (f"Password = {pw[4]}", pw[4]),
        (f"mysql -u root --password {pw[5]} prod", pw[5]),
        (f"pwd={pw[6]}", pw[6]),
        (f"DB_PASSWORD={pw[7]}\nDB_HOST=10.0.0.5", pw[7]),
        (f'{{"username": "ops", "password": "{pw[8]}"}}', pw[8]),
        (f"my passphrase is '{words}'", words),
        (f"The admin password was {pw[9]}, but I changed it", pw[9]),
        (f"login with user=ops&pass={pw[10]}", pw[10]),
        (f"new password is: {pw[11]}", pw[11]),
        (f"my PIN is {pin}, don't tell anyone", pin),
    ]
    return [Sample("password", t, (sec,)) for t, sec in texts]


FAMILIES: list[Callable[[random.Random], list[Sample]]] = [
    _aws,
    _iban,
    _pem,
    _basic,
    _stripe,
    _gcp,
    _passwords,
]


def positives(seed: int = 25) -> list[Sample]:
    rng = random.Random(seed)
    return [s for family in FAMILIES for s in family(rng)]


def _random_uuid(rng: random.Random) -> str:
    h = _tok(rng, "0123456789abcdef", 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _not_iban(rng: random.Random) -> str:
    """IBAN-shaped (country, check digits, right length) but failing mod 97: a product code."""
    while True:
        value = iban(rng, *rng.choice(_IBAN_FORMS))
        wrong = value[:2] + f"{(int(value[2:4]) + rng.randint(1, 96)) % 97:02d}" + value[4:]
        if int("".join(str(int(c, 36)) for c in wrong[4:] + wrong[:4])) % 97 != 1:
            return wrong


def negatives(seed: int = 25) -> list[str]:
    """Text that must come out of redaction unchanged."""
    rng = random.Random(seed)
    sha = "5012345678" + _tok(rng, "0123456789abcdef", 30)
    image = base64.b64encode(rng.randbytes(600)).decode()
    fixed = [
        "The quick brown fox jumps over the lazy dog.",
        "Forgot your password? Click 'Reset password' on the sign-in page.",
        "The password is required and must be at least 12 characters long.",
        "Your password is too short.",
        "The password is correct.",
        "The password is case-sensitive, the user name is not.",
        "The password was changed yesterday.",
        "my password manager is 1Password",
        "Use a basic auth header for the legacy API.",
        "Basic understanding of Python is enough; basic idea: cache the tokens.",
        "Authorization header missing",
        "The AWS secret access key is stored in Secrets Manager.",
        "Set AWS_SECRET_ACCESS_KEY in your environment before running terraform.",
        'password = os.environ["DB_PASSWORD"]',
        "secret = os.getenv('API_SECRET')",
        "token = request.headers.get('Authorization')",
        "password: ${DB_PASSWORD}",
        "api_key: {{ .Values.apiKey }}",
        "password = None",
        "password_hash = bcrypt.hashpw(raw, salt)",
        "max_tokens: 4096, input_tokens=1234567, token_count: 12",
        '{"model": "gpt-4o", "max_tokens": 256, "temperature": 0.2, "stream": true}',
        "sk-learn is not a package name; scikit-learn is.",
        "risk_live_events and ask_test_cases are table names",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
        "commit a94a8fe5ccb19ba61c4c0873d391e987982fbbd3 fixed it",
        f"git checkout {sha}",
        "id 123e4567-e89b-12d3-a456-426614174000",
        f"request {_random_uuid(rng)} and {_random_uuid(rng)}",
        "Python 3.11.7 was released on 2023-12-04; it costs 12.50 USD and has 4096 tokens.",
        "order 12345678, room 42, port 8080, version 2.31.0",
        "ISBN 978-3-16-148410-0",
        "IBAN stands for International Bank Account Number; a German one has 22 characters.",
        "Pass the salt, please.",
        "Set the PIN code length to 6.",
        "The pin is located on the left side of the board.",
        "2026-12-02T02:33:07Z INFO started",
        f"data:image/png;base64,{image}",
        *(f"SKU {_not_iban(rng)}" for _ in range(12)),
        *(
            f"part {_tok(rng, string.ascii_uppercase + string.digits, rng.randint(15, 34))}"
            for _ in range(12)
        ),
    ]
    return fixed


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def leaks(out: str, sample: Sample, window: int = 10) -> list[str]:
    """The sample's secrets any part of which survives in `out`: the whole value or any `window`
    characters of it, whitespace ignored on both sides (a grouped IBAN, a re-wrapped key)."""
    flat = _compact(out)
    found = []
    for secret in sample.secrets:
        s = _compact(secret)
        k = min(window, len(s))
        if secret in out or any(s[i : i + k] in flat for i in range(len(s) - k + 1)):
            found.append(secret)
    return found
