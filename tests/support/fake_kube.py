"""A fake Kubernetes API server for EndpointSlices, speaking the real list/watch wire format.

GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices answers an EndpointSliceList with a
resourceVersion; with `watch=true` it streams newline-delimited JSON watch events
(`{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}`) as the test changes slices, until
`timeoutSeconds` or shutdown. `labelSelector=kubernetes.io/service-name=X` filters like the real one.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from aiohttp import web

from tests.support.thread_server import serve_in_thread

SERVICE_LABEL = "kubernetes.io/service-name"


class FakeKube:
    def __init__(self) -> None:
        self.slices: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> slice
        self.version = 1
        self.watchers: list[tuple[str, str, asyncio.Queue[bytes]]] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- test side (any thread) ---------------------------------------------------------------
    def apply(
        self, namespace: str, name: str, service: str, addresses: list[dict[str, Any]], port: int
    ) -> None:
        """Create or replace a slice; `addresses` are endpoint dicts (addresses + conditions)."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._apply, namespace, name, service, addresses, port)

    def delete(self, namespace: str, name: str) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._delete, namespace, name)

    # -- server side (its loop) ---------------------------------------------------------------
    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def _apply(self, ns: str, name: str, service: str, endpoints: list[dict[str, Any]], port: int) -> None:
        kind = "MODIFIED" if (ns, name) in self.slices else "ADDED"
        obj = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {SERVICE_LABEL: service},
                "resourceVersion": self._bump(),
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }
        self.slices[(ns, name)] = obj
        self._notify(ns, kind, obj)

    def _delete(self, ns: str, name: str) -> None:
        obj = self.slices.pop((ns, name), None)
        if obj is not None:
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self._bump()
            self._notify(ns, "DELETED", obj)

    def _notify(self, ns: str, kind: str, obj: dict[str, Any]) -> None:
        service = obj["metadata"]["labels"][SERVICE_LABEL]
        line = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        for w_ns, w_service, queue in self.watchers:
            if w_ns == ns and w_service == service:
                queue.put_nowait(line)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector", "")
        service = selector.removeprefix(f"{SERVICE_LABEL}=") if selector.startswith(SERVICE_LABEL) else ""
        if request.query.get("watch") in ("true", "1", "True"):
            resp = web.StreamResponse(headers={"content-type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            queue: asyncio.Queue[bytes] = asyncio.Queue()
            entry = (ns, service, queue)
            self.watchers.append(entry)
            timeout = float(request.query.get("timeoutSeconds", "3600"))
            try:
                async with asyncio.timeout(timeout):
                    while True:
                        await resp.write(await queue.get())
            except TimeoutError:
                pass
            finally:
                self.watchers.remove(entry)
            return resp
        items = [
            s
            for (s_ns, _), s in sorted(self.slices.items())
            if s_ns == ns and (not service or s["metadata"]["labels"].get(SERVICE_LABEL) == service)
        ]
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSliceList",
            "metadata": {"resourceVersion": str(self.version)},
            "items": items,
        }
        return web.json_response(body)


@contextmanager
def fake_kube(port: int) -> Iterator[FakeKube]:
    kube = FakeKube()

    def build() -> web.Application:
        kube.loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", kube.handle)
        return app

    with serve_in_thread(port, build, "fake API server"):
        yield kube


def kubeconfig(port: int, namespace: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: gateway, user: {token: test-token}}]\n"
        f"contexts: [{{name: fake, context: {{cluster: fake, user: gateway, namespace: {namespace}}}}}]\n"
        "current-context: fake\n"
    )
