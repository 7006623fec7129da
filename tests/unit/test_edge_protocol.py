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


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Owner:
    _holding: object = None


def _hold() -> tuple[object, _Recorder, _Owner]:
    from gateway.edge.protocol import _HeadHold

    rec, owner = _Recorder(), _Owner()
    return _HeadHold(rec, owner), rec, owner  # type: ignore[arg-type]


def test_a_response_head_goes_out_with_the_first_body_part_in_one_write() -> None:
    hold, rec, owner = _hold()
    hold.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")  # type: ignore[attr-defined]
    assert rec.writes == [] and owner._holding is hold
    hold.write(b"ok")  # type: ignore[attr-defined]
    hold.write(b"more")  # type: ignore[attr-defined]
    assert rec.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"more"]
    assert owner._holding is None


def test_100_continue_is_written_at_once_and_a_lone_head_on_flush_or_close() -> None:
    hold, rec, owner = _hold()
    hold.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[attr-defined]
    assert rec.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    hold.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")  # type: ignore[attr-defined]
    hold.flush()  # type: ignore[attr-defined]  # what on_response_complete does (HEAD: no body write)
    assert rec.writes[-1] == b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n" and owner._holding is None
    hold2, rec2, _ = _hold()
    hold2.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")  # type: ignore[attr-defined]
    hold2.close()  # type: ignore[attr-defined]
    assert rec2.writes == [b"HTTP/1.1 500 Internal Server Error\r\n\r\n"] and rec2.closed
