"""`llmgw keys ...`: manage tenant keys.

`create`, `list` and `revoke` call a running gateway's admin API (`gateway.tenancy.admin`) over HTTP, so they
work the same with the memory store (the keys live in that process) and the Redis store. `hash` and
`generate` are offline: they produce what a small deployment writes into `tenancy.keys` of the policy.
Arguments are declared in `gateway.cli`; this module is imported only when `keys` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from gateway.tenancy.keys import generate_key, hash_key

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 10.0


class CliError(Exception):
    """Printed to stderr; the command exits with 1."""


def run(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    try:
        command = args.keys_command
        if command == "hash":
            return _hash(args)
        if command == "generate":
            return _generate()
        with _client(args, transport) as client:
            if command == "create":
                return _create(args, client)
            if command == "list":
                return _list(args, client)
            if command == "revoke":
                return _revoke(args, client)
        raise CliError(f"unknown keys command {command!r}")
    except CliError as exc:
        print(f"llmgw keys: {exc}", file=sys.stderr)
        return 1


def _client(args: argparse.Namespace, transport: httpx.BaseTransport | None) -> httpx.Client:
    url = args.url or os.environ.get("LLMGW_URL") or DEFAULT_URL
    admin_key = args.admin_key or os.environ.get("LLMGW_ADMIN_KEY")
    if not admin_key:
        raise CliError("no admin key: set LLMGW_ADMIN_KEY (or pass --admin-key)")
    return httpx.Client(
        base_url=url.rstrip("/"),
        headers={"authorization": f"Bearer {admin_key}"},
        timeout=TIMEOUT_S,
        transport=transport,
    )


def _call(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    try:
        response = client.request(method, path, json=body)
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the gateway at {client.base_url}: {exc}") from exc
    if response.status_code >= 400:
        raise CliError(_error_text(response))
    return response.json()


def _error_text(response: httpx.Response) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:200] or response.reason_phrase
    hint = ""
    if response.status_code == 401:
        hint = " (check LLMGW_ADMIN_KEY / --admin-key)"
    elif response.status_code == 404 and "error" not in response.text:
        hint = " (is --url / LLMGW_URL a gateway?)"
    return f"HTTP {response.status_code}: {message}{hint}"


def _create(args: argparse.Namespace, client: httpx.Client) -> int:
    body: dict[str, Any] = {"org": args.org, "app": args.app, "tier": args.tier}
    if args.models:
        body["models"] = _names(args.models)
    if args.pools:
        body["pools"] = _names(args.pools)
    if args.limits:
        body["limits"] = parse_limits(args.limits)
    if args.id:
        body["id"] = args.id
    created = _call(client, "POST", "/admin/keys", body)
    if args.json:
        print(json.dumps(created, indent=2))
        return 0
    # The key alone on the first line, so `llmgw keys create ... | head -1` captures it.
    print(created["key"])
    print(f"id={created['id']} org={created['org']} app={created['app']} tier={created['tier']}")
    print("Store this key now: the gateway keeps only its hash and cannot show it again.", file=sys.stderr)
    return 0


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def parse_limits(items: list[str]) -> dict[str, Any]:
    """`--limits`: JSON objects and/or key=value pairs (values read as JSON when they parse, so
    `tokens_per_min=3000` is a number and `shadow=["concurrent"]` a list), merged in order. The admin
    API validates the names and values (`CreateKey.limits`) and its error names the field."""
    out: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                obj = json.loads(item)
            except ValueError as exc:
                raise CliError(f"--limits: not valid JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise CliError("--limits: a JSON value must be an object")
            out.update(obj)
            continue
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--limits: expected key=value or a JSON object, got {item!r}")
        try:
            out[name.strip()] = json.loads(raw)
        except ValueError:
            out[name.strip()] = raw
    return out


def _list(args: argparse.Namespace, client: httpx.Client) -> int:
    keys: list[dict[str, Any]] = _call(client, "GET", "/admin/keys")["data"]
    if args.json:
        print(json.dumps(keys, indent=2))
        return 0
    rows = [("ID", "ORG", "APP", "TIER", "MODELS", "POOLS", "SOURCE", "STATUS", "SHA256")]
    for k in keys:
        models = ",".join(k["models"]) or "*"
        pools = ",".join(k.get("pools", ())) or "*"
        rows.append(
            (
                k["id"],
                k["org"],
                k["app"],
                k["tier"],
                models,
                pools,
                k["source"],
                k["status"],
                k["sha256_prefix"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _revoke(args: argparse.Namespace, client: httpx.Client) -> int:
    _call(client, "DELETE", f"/admin/keys/{args.id}")
    print(
        f"revoked {args.id} (refused at once by the gateway that revoked it and, through the revocation "
        "broadcast, by the other replicas; at most the key cache TTL, 5 s, for a replica that missed it)"
    )
    return 0


def _hash(args: argparse.Namespace) -> int:
    # `-` (or no argument) reads the key from stdin, keeping it out of shell history and `ps`.
    key = sys.stdin.readline().strip() if args.key in (None, "-") else args.key
    if not key:
        raise CliError("no key given")
    print(hash_key(key))
    return 0


def _generate() -> int:
    key = generate_key()
    print(key)
    print(hash_key(key))
    print("Line 1 is the key (give it to the tenant), line 2 its sha256 for tenancy.keys.", file=sys.stderr)
    return 0
