"""Discovery sources feed a pool's membership: `run(update)` calls `update(base_urls)` on change.

Static lists call it once. DNS re-resolves a headless Service name (every A and AAAA record is a
replica) every `interval_s`. Kubernetes watches EndpointSlices (pools.kube). A failed lookup keeps
the last known set: losing the resolver must not empty a healthy pool.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pools.config import DnsEndpoints, Endpoints

log = logging.getLogger(__name__)

Update = Callable[[Sequence[str]], None]
Resolve = Callable[[str, int], Awaitable[list[str]]]
_NO_RECORDS = (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))


class Discovery(Protocol):
    async def run(self, update: Update) -> None: ...


class StaticDiscovery:
    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = list(urls)

    async def run(self, update: Update) -> None:
        update(self.urls)


async def resolve_all(name: str, port: int) -> list[str]:
    """Every address of `name` (A and AAAA), sorted, via the system resolver (honours /etc/hosts)."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def nameserver_resolver(nameserver: str) -> Resolve:
    """A resolver that asks one DNS server for A and AAAA records (no /etc/hosts, no search list)."""
    import dns.asyncresolver  # only pools configured with a nameserver need dnspython
    import dns.exception
    import dns.resolver

    host, port = nameserver, 53
    if nameserver.startswith("["):
        host, _, rest = nameserver[1:].partition("]")
        port = int(rest.removeprefix(":") or 53)
    elif nameserver.count(":") == 1:
        host, _, p = nameserver.partition(":")
        port = int(p)
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [host]
    resolver.port = port
    resolver.lifetime = 2.0

    async def resolve(name: str, _port: int) -> list[str]:
        found: set[str] = set()
        for rdtype in ("A", "AAAA"):
            try:
                answer = await resolver.resolve(name, rdtype)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            except dns.exception.DNSException as exc:
                raise OSError(f"DNS query for {name} {rdtype} failed: {exc}") from exc
            found.update(r.to_text() for r in answer)
        return sorted(found)

    return resolve


def url_of(scheme: str, address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}"


class DnsDiscovery:
    def __init__(self, cfg: DnsEndpoints, resolve: Resolve | None = None) -> None:
        self._cfg = cfg
        self._resolve = resolve or (nameserver_resolver(cfg.nameserver) if cfg.nameserver else resolve_all)

    async def run(self, update: Update) -> None:
        cfg = self._cfg
        last: list[str] | None = None
        while True:
            try:
                addresses = await self._resolve(cfg.name, cfg.port)
            except socket.gaierror as exc:
                # NXDOMAIN for a headless Service with no ready pod means zero replicas, not a failure.
                if exc.errno not in _NO_RECORDS:
                    log.warning("pool DNS lookup of %s failed: %s (keeping the last set)", cfg.name, exc)
                    await asyncio.sleep(cfg.interval_s)
                    continue
                addresses = []
            except OSError as exc:
                log.warning("pool DNS lookup of %s failed: %s (keeping the last set)", cfg.name, exc)
                await asyncio.sleep(cfg.interval_s)
                continue
            urls = [url_of(cfg.scheme, a, cfg.port) for a in addresses]
            if urls != last:
                update(urls)
                last = urls
            await asyncio.sleep(cfg.interval_s)


def discovery_for(endpoints: Endpoints) -> Discovery:
    if endpoints.static:
        return StaticDiscovery(endpoints.static)
    if endpoints.dns is not None:
        return DnsDiscovery(endpoints.dns)
    assert endpoints.kubernetes is not None
    from pools.kube import KubernetesDiscovery  # the kubernetes client loads only when configured

    return KubernetesDiscovery(endpoints.kubernetes)
