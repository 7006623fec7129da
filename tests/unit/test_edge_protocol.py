"""The edge protocol's wiring; its behaviour is tested end to end (tests/e2e/security/test_edge_limits.py)."""

from __future__ import annotations

import importlib

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.edge.protocol import EdgeLimits, guarded_protocol
from gateway.edge.server import edge_limits
from gateway.relay._body import too_deep
from gateway.settings import Settings


def test_settings_reach_the_protocol_class() -> None:
    limits = edge_limits(Settings(max_headers=12, write_stall_s=3.5, send_buffer_bytes=8192))
    assert limits == EdgeLimits(max_headers=12, write_stall_s=3.5, send_buffer_bytes=8192)
    cls = guarded_protocol(limits)
    assert issubclass(cls, HttpToolsProtocol) and cls.limits is limits  # type: ignore[attr-defined]


def test_workers_read_their_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_HEADER_TIMEOUT_S", "7")
    import gateway.edge._worker_protocol as worker

    worker = importlib.reload(worker)
    assert worker.WorkerProtocol.limits.header_timeout_s == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("raw", "limit", "deep"),
    [
        (b"[" * 65 + b"]" * 65, 64, True),
        (b"[" * 64 + b"]" * 64, 64, False),
        (b'{"a": "' + b"[" * 100 + b'"}', 64, False),  # brackets inside a string do not nest
        (
            b'{"a": "\\\\", "b": ' + b"[" * 70 + b"]" * 70 + b"}",
            64,
            True,
        ),  # an escaped backslash ends no string
        (b'{"a": "\\"' + b"[" * 70 + b'"}', 64, False),  # an escaped quote does not end the string
        (b'{"a": [' + b"{}," * 200 + b"{}]}", 4, False),  # many brackets, shallow
    ],
)
def test_too_deep(raw: bytes, limit: int, deep: bool) -> None:
    assert too_deep(raw, limit) is deep
