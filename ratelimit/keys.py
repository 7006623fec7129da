"""Redis key scheme of the limiter: one hash tag for everything, escaped scope ids.

Every key starts with the hash tag `{<key_prefix>}`, so all keys of one script call (and in fact all
limiter keys) live in ONE Redis Cluster slot: a request's admission touches key, app, org, global and
pool levels at once, and only a single slot keeps the shared levels exact without cross-slot
coordination. One slot handles ~100k script calls/s, far above one limiter call per LLM request.

A rule's base key (passed to the scripts in KEYS):

    {P}:<level>:<scope>:<dimension>          e.g. {llmgw}:org:acme:tokens

`<scope>` is percent-encoded (RFC 3986, nothing kept but letters, digits and `_.-~`), so `:`, `{`, `}`,
`/`, `*` and `%` never appear raw: two different scopes can never produce the same key, and a scope
cannot open a second hash tag. A scope made of several names (the app level: org and app) is built by
`scope_id`, which escapes each part before joining them with `/`: org `acme` / app `x/y` is `acme/x%2Fy`
and org `acme/x` / app `y` is `acme%2Fx/y`, so two tenants never share a bucket (the response cache
builds its tenant scopes the same way). The scripts derive the per-rule keys from the base key by suffix:

    <base>:sw        minute rules: HASH sub-window n (= floor(server_ms / sub_window_ms)) -> settled
                     usage, plus `t` (the sum of those fields) and `h` (the newest n); kept until its
                     newest sub-window has left the window, older fields dropped (and taken out of `t`)
                     when a new one starts, so a check reads two fields, not twelve (lib_v4.lua)
    <base>:q:<p>     quota rules: settled usage of UTC period p (`d<days since epoch>` or `m<YYYYMM>`),
                     STRING, expires one day after the period ends

Live reservations and concurrency slots are leases, one record per request (not per rule), in two keys
of the hash tag itself:

    {P}:leases       ZSET request id -> lease expiry (server ms)
    {P}:lh           HASH `@<request id>` -> "<rule base key> <amount>\n" per rule the request holds,
                     and <rule base key> -> total amount of the live leases counted at that rule

An admission thus writes a fixed number of keys however many rules it spans (per-rule lease sets cost
three writes per rule and dominated the scripts' time). Both expire 2 x lease + 1 s after the last lease
write, when every lease in them has expired.

Derived keys carry the base key's hash tag, so they hash to the same slot (checked by a unit test with
`redis.crc.key_slot`). They cannot be declared in KEYS up front because sub-window and period depend on
the Redis server clock, which only the script reads.
"""

from __future__ import annotations

from urllib.parse import quote

from ratelimit.model import Rule


def hash_tag(key_prefix: str) -> str:
    return "{" + key_prefix + "}"


def scope_id(*parts: str) -> str:
    """One scope id of several names (org, app): each part escaped on its own, then joined with `/`.

    Joining raw names is ambiguous (`acme` + `x/y` and `acme/x` + `y` both give `acme/x/y`); escaping
    every part (`/` and `%` included) first makes the id injective in its parts.
    """
    return "/".join(quote(p, safe="") for p in parts)


def encode_scope(scope: str) -> str:
    """Injective, tag-safe encoding of a scope id (`%` itself is encoded, so decoding is unambiguous)."""
    return quote(scope, safe="")


def rule_key(key_prefix: str, rule: Rule) -> str:
    return f"{hash_tag(key_prefix)}:{rule.level.value}:{encode_scope(rule.scope)}:{rule.dimension.value}"


def derived_keys(base: str, sub_window: int, period: str) -> list[str]:
    """Every key a script may derive from `base` (for tests and tooling; the scripts build them in Lua)."""
    tag = base[: base.index("}") + 1]
    return [f"{base}:sw", f"{base}:q:{period}", f"{tag}:leases", f"{tag}:lh"]
