"""Redis key scheme of the limiter: one prefix and one hash tag for everything, escaped scope ids.

Every key starts with `<key_prefix>:{<key_prefix>}` (the root, `P:{P}`): the prefix every key the
gateway writes starts with (one Redis ACL pattern, `~P:*`, covers them all), then the hash tag, so
all keys of one script call (and in fact all limiter keys) live in ONE Redis Cluster slot: a
request's admission touches key, app, org, global and pool levels at once, and only a single slot
keeps the shared levels exact without cross-slot coordination. One slot handles ~100k script calls/s,
far above one limiter call per LLM request.

A rule's base key (passed to the scripts in KEYS):

    P:{P}:<level>:<scope>:<dimension>        e.g. llmgw:{llmgw}:org:acme:tokens

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
under the root itself:

    P:{P}:leases     ZSET request id -> lease expiry (server ms)
    P:{P}:lh         HASH `@<request id>` -> "<rule base key> <amount>\n" per rule the request holds,
                     and <rule base key> -> total amount of the live leases counted at that rule

An admission thus writes a fixed number of keys however many rules it spans (per-rule lease sets cost
three writes per rule and dominated the scripts' time). Both expire 2 x lease + 1 s after the last lease
write, when every lease in them has expired.

Derived keys carry the base key's root, so they hash to the same slot (checked by a unit test with
`redis.crc.key_slot`). They cannot be declared in KEYS up front because sub-window and period depend on
the Redis server clock, which only the script reads.

Before 0.3 the root was the bare hash tag `{P}`. The same hash tag means the same slot, so the
settled counters of those names move to the new ones in one script call each (`legacy_moves`, run
by the gateway at start; docs/design/004).
"""

from __future__ import annotations

from urllib.parse import quote

from ratelimit.model import Rule


def root(key_prefix: str) -> str:
    """`P:{P}`: the prefix of every key, then the hash tag that puts all limiter keys in one slot."""
    return f"{key_prefix}:{{{key_prefix}}}"


def legacy_root(key_prefix: str) -> str:
    """The root before 0.3: the hash tag alone (same slot as `root`)."""
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
    return f"{root(key_prefix)}:{rule.level.value}:{encode_scope(rule.scope)}:{rule.dimension.value}"


def derived_keys(base: str, sub_window: int, period: str) -> list[str]:
    """Every key a script may derive from `base` (for tests and tooling; the scripts build them in Lua)."""
    head = base[: base.index("}") + 1]
    return [f"{base}:sw", f"{base}:q:{period}", f"{head}:leases", f"{head}:lh"]


def legacy_move(key_prefix: str, name: str) -> tuple[str, str] | None:
    """(kind, new name) of a settled counter under the legacy root: `q` quota counter, `sw` minute
    window; None for anything else (leases expire within seconds of their last write and stay put)."""
    old = legacy_root(key_prefix) + ":"
    if not name.startswith(old) or name.endswith((":leases", ":lh")):
        return None
    rest = name[len(old) :]
    kind = "sw" if rest.endswith(":sw") else "q" if ":q:" in rest else None
    return None if kind is None else (kind, f"{root(key_prefix)}:{rest}")
