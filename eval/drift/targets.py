"""What `llmgw drift --pools A B` calls: base URLs, or pool names of a gateway policy (`--config`).

A pool name resolves to the pool's first static endpoint and its `model` (the name the engine
serves); its `api_key_env`, if any, supplies the key. A pool discovered by DNS or Kubernetes has no URL
this offline tool can know, so it must be given as a URL. With a URL and no `--model`, the model is
the first one the server lists at /v1/models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from gateway.config import ConfigError, load_policy


class TargetError(ValueError):
    """A pool that cannot be resolved or reached; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Target:
    label: str  # what the report calls it: the pool name or the URL as given
    url: str  # base URL, no /v1
    model: str
    headers: dict[str, str]


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _auth(env: str | None) -> dict[str, str]:
    if not env:
        return {}
    key = os.environ.get(env)
    if not key:
        raise TargetError(f"environment variable {env} (the pool's API key) is not set")
    return {"authorization": f"Bearer {key.strip()}"}


def _listed_model(client: httpx.Client, url: str, headers: dict[str, str]) -> str:
    try:
        resp = client.get(f"{url}/v1/models", headers=headers)
    except httpx.HTTPError as exc:
        raise TargetError(f"{url}: unreachable ({type(exc).__name__}: {exc})") from None
    try:
        data = resp.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise TargetError(
            f"{url}/v1/models answered {resp.status_code} without a model list: pass --model"
        ) from None


def resolve(
    spec: str, client: httpx.Client, config: str | None, model: str | None, key_env: str | None
) -> Target:
    if _is_url(spec):
        url = spec.rstrip("/").removesuffix("/v1")
        headers = _auth(key_env)
        return Target(spec, url, model or _listed_model(client, url, headers), headers)
    if config is None:
        raise TargetError(f"'{spec}' is not a URL: pass base URLs, or pool names with --config POLICY.yaml")
    try:
        policy = load_policy(config)
    except ConfigError as exc:
        raise TargetError(str(exc)) from None
    try:
        pool = policy.pool(spec)
    except KeyError:
        names = sorted(p.name for p in policy.pools)
        raise TargetError(f"{config}: no pool '{spec}' (pools: {names})") from None
    static = pool.endpoints.static if pool.endpoints is not None else []
    if not static:
        raise TargetError(f"pool '{spec}' has no static endpoint (DNS/Kubernetes discovery): pass its URL")
    return Target(spec, static[0].rstrip("/"), model or pool.model, _auth(key_env or pool.api_key_env))
