"""Kubernetes discovery: list and watch the EndpointSlices of a Service (the `kubernetes` client).

Flow: list the slices labelled `kubernetes.io/service-name=<service>` in the namespace, publish the
ready addresses, then watch from the list's resourceVersion and republish on every change. A
watch that expires (410 Gone) or fails relists after a short backoff; until then the last set
stays (losing the API server must not empty a healthy pool). The client is synchronous, so the
list/watch loop runs in a thread and hands results to the event loop.

Which endpoints count: `conditions.ready` true (unset counts as ready, as the API documents) and
not `terminating` -- a terminating pod finishes its streams but gets no new requests. The port is
the configured number, or the slice port with the configured name.

RBAC (the gateway's ServiceAccount, in each namespace it discovers in):
    apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"]
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pools.config import KubernetesEndpoints
from pools.discovery import Update, url_of

log = logging.getLogger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
Slice = Mapping[str, Any]


def ready_urls(slices: Mapping[str, Slice], port: int | str, scheme: str) -> list[str]:
    """Base URLs of the ready, non-terminating endpoints of all slices (pure)."""
    urls: set[str] = set()
    for sl in slices.values():
        if isinstance(port, int):
            number: int | None = port
        else:
            number = next((p.get("port") for p in sl.get("ports") or [] if p.get("name") == port), None)
        if number is None:
            continue
        for ep in sl.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            if cond.get("ready") is False or cond.get("terminating") is True:
                continue
            for address in ep.get("addresses") or []:
                urls.add(url_of(scheme, address, int(number)))
    return sorted(urls)


def _load_client() -> tuple[Any, str]:
    """(DiscoveryV1Api, the namespace to default to): in-cluster, else KUBECONFIG / ~/.kube/config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        namespace = NAMESPACE_FILE.read_text().strip()
    except (config.ConfigException, OSError):
        config.load_kube_config()  # type: ignore[no-untyped-call]
        _, active = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
        namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return client.DiscoveryV1Api(), namespace


class KubernetesDiscovery:
    def __init__(self, cfg: KubernetesEndpoints, api: Any = None, backoff_s: float = 1.0) -> None:
        self._cfg = cfg
        self._api = api
        self._backoff = backoff_s
        self._stop = threading.Event()
        self._watch: Any = None

    async def run(self, update: Update) -> None:
        loop = asyncio.get_running_loop()

        def publish(urls: list[str]) -> None:
            loop.call_soon_threadsafe(update, urls)

        thread = threading.Thread(target=self._loop, args=(publish,), daemon=True, name="k8s-discovery")
        thread.start()
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._stop.set()
            if self._watch is not None:
                self._watch.stop()

    def _loop(self, publish: Any) -> None:
        from kubernetes import watch

        cfg = self._cfg
        api, namespace = (self._api, "default") if self._api is not None else _load_client()
        namespace = cfg.namespace or namespace
        selector = f"kubernetes.io/service-name={cfg.service}"
        last: list[str] | None = None
        while not self._stop.is_set():
            try:
                resp = api.list_namespaced_endpoint_slice(
                    namespace, label_selector=selector, _preload_content=False
                )
                listed = json.loads(resp.data)
                slices = {s["metadata"]["name"]: s for s in listed.get("items") or []}
                last = self._publish(publish, slices, last)
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    api.list_namespaced_endpoint_slice,
                    namespace,
                    label_selector=selector,
                    resource_version=listed["metadata"].get("resourceVersion"),
                    allow_watch_bookmarks=True,
                    deserialize=False,
                ):
                    if self._stop.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or event.get("raw_object")
                    if isinstance(obj, str):
                        obj = json.loads(obj)
                    if kind == "ERROR" or not isinstance(obj, dict):
                        break  # e.g. 410 Gone delivered as an event: relist
                    name = obj.get("metadata", {}).get("name")
                    if kind in ("ADDED", "MODIFIED"):
                        slices[name] = obj
                    elif kind == "DELETED":
                        slices.pop(name, None)
                    else:
                        continue  # BOOKMARK
                    last = self._publish(publish, slices, last)
            except Exception as exc:  # noqa: BLE001 - any API or network failure: keep the set, relist
                log.warning("EndpointSlice list/watch of %s failed: %s", cfg.service, exc)
            time.sleep(self._backoff)

    def _publish(self, publish: Any, slices: Mapping[str, Slice], last: list[str] | None) -> list[str]:
        urls = ready_urls(slices, self._cfg.port, self._cfg.scheme)
        if urls != last:
            publish(urls)
        return urls
