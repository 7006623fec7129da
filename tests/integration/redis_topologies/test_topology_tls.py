"""The gateway on a TLS-only Redis that requires client certificates and an ACL user (issue 41): the
limiter (with either of its clients), the key store and the response cache work with the CA, the
client certificate and the user given through LLMGW_REDIS_*; a wrong CA, a wrong password or no client
certificate stops the start with a message naming the setting, never a traceback.

The module's gateways and its refused starts boot side by side (start-up is most of its time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.redis_topologies.conftest import (
    Gateway,
    StartAttempt,
    assert_refused_start,
    exercise,
    gateway_env,
    start_attempts,
    write_policy,
)
from tests.support.redis_topologies import TlsRedis
from tests.support.stack import Stack

CLIENTS = ("redis-py", "resp")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    with TlsRedis(tmp_path_factory.mktemp("tls") / "redis") as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(tmp_path_factory.mktemp("tls-stack")) as s:
        yield s


@pytest.fixture(scope="module")
def policy(stack: Stack) -> Path:
    sim = stack.sim("sim", "--profile", "instant")
    return write_policy(stack.tmp / "policy.yaml", sim.url)


@pytest.fixture(scope="module")
def refusals(stack: Stack, policy: Path, tls: TlsRedis) -> Iterator[dict[str, StartAttempt]]:
    full = tls.env()
    no_cert = {
        k: v for k, v in full.items() if k not in ("LLMGW_REDIS_TLS_CERT_FILE", "LLMGW_REDIS_TLS_KEY_FILE")
    }
    envs = {
        "wrong-ca": {**full, "LLMGW_REDIS_TLS_CA_FILE": str(tls.wrong_ca_file)},
        "wrong-password": {**full, "LLMGW_REDIS_PASSWORD": "not-the-password"},
        "no-client-cert": no_cert,
    }
    with start_attempts(stack.tmp, policy, envs) as attempts:
        yield attempts


@pytest.fixture(scope="module")
def gateways(
    stack: Stack, policy: Path, tls: TlsRedis, refusals: dict[str, StartAttempt]
) -> dict[str, Gateway]:
    """One gateway per limiter client, booting together with the refused starts."""
    services = {
        client: stack.gateway(
            policy,
            env=gateway_env({**tls.env(), "LLMGW_REDIS_LIMITER_CLIENT": client}),
            name=f"gateway-{client}",
            ready=False,
        )
        for client in CLIENTS
    }
    stack.ready()
    return {client: Gateway(service) for client, service in services.items()}


@pytest.mark.parametrize("client", CLIENTS)
def test_limiter_key_store_and_cache_over_tls(gateways: dict[str, Gateway], client: str) -> None:
    exercise(gateways[client], f"tls-{client}")


def test_wrong_ca_refuses_to_start(refusals: dict[str, StartAttempt]) -> None:
    assert_refused_start(*refusals["wrong-ca"].outcome(), "LLMGW_REDIS_TLS_CA_FILE")


def test_wrong_password_refuses_to_start(refusals: dict[str, StartAttempt]) -> None:
    code, out = refusals["wrong-password"].outcome()
    assert_refused_start(code, out, "LLMGW_REDIS_PASSWORD")
    assert "not-the-password" not in out  # the message names the setting, never its value


def test_missing_client_certificate_refuses_to_start(refusals: dict[str, StartAttempt]) -> None:
    assert_refused_start(*refusals["no-client-cert"].outcome(), "LLMGW_REDIS_TLS")
