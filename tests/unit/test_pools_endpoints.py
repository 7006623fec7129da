"""Discovery's pure parts: which EndpointSlice endpoints count, URLs of IPv4/IPv6 addresses,
and the DNS loop keeping its last set when the resolver fails."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

import pytest

from pools.config import DnsEndpoints, Endpoints
from pools.discovery import DnsDiscovery, url_of
from pools.kube import ready_urls


def _slice(endpoints: list[dict[str, object]], ports: list[dict[str, object]]) -> dict[str, object]:
    return {"endpoints": endpoints, "ports": ports}


def test_ready_urls_honour_ready_terminating_and_named_ports() -> None:
    ports = [{"name": "http", "port": 8000}, {"name": "metrics", "port": 9000}]
    slices = {
        "a": _slice(
            [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": True, "terminating": True}},
                {"addresses": ["10.0.0.4"], "conditions": {}},  # unknown readiness counts as ready
            ],
            ports,
        ),
        "b": _slice([{"addresses": ["fd00::5"], "conditions": {"ready": True}}], ports),
    }
    assert ready_urls(slices, "http", "http") == [
        "http://10.0.0.1:8000",
        "http://10.0.0.4:8000",
        "http://[fd00::5]:8000",
    ]
    assert ready_urls(slices, 8080, "https")[0] == "https://10.0.0.1:8080"
    assert ready_urls(slices, "grpc", "http") == []  # no such port name: nothing to call


def test_url_of_brackets_ipv6() -> None:
    assert url_of("http", "::1", 80) == "http://[::1]:80"


def test_endpoints_need_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Endpoints()
    with pytest.raises(ValueError, match="exactly one"):
        Endpoints(static=["http://a:1"], dns=DnsEndpoints(name="x"))


async def test_dns_keeps_the_last_set_on_failure_and_empties_on_nxdomain() -> None:
    answers: list[list[str] | BaseException] = [
        ["10.0.0.2", "10.0.0.1"],
        OSError("resolver down"),
        socket.gaierror(socket.EAI_NONAME, "no such name"),
    ]
    seen: list[list[str]] = []
    done = asyncio.Event()

    async def resolve(name: str, port: int) -> list[str]:
        if not answers:
            done.set()
            await asyncio.Event().wait()
        a = answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a

    def update(urls: Sequence[str]) -> None:
        seen.append(list(urls))

    task = asyncio.create_task(
        DnsDiscovery(DnsEndpoints(name="x", port=80, interval_s=0.001), resolve).run(update)
    )
    await done.wait()
    task.cancel()
    assert seen == [["http://10.0.0.2:80", "http://10.0.0.1:80"], []]
