"""The pure parts of the overhead benchmark: statistics, parsing, target evaluation, rendering.

No timing is asserted here: the benchmark is a measuring command (eval/bench_overhead.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.bench_overhead import (
    TARGETS,
    Target,
    _ClientConn,
    count_sse_events,
    evaluate_targets,
    parse_wrk,
    percentile,
    render,
    request_body,
    summarize_ns,
    wrk_script,
)


def test_percentile_interpolates_like_numpy_linear() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_summarize_converts_ns_to_ms() -> None:
    stats = summarize_ns([1_000_000 * i for i in range(1, 101)])  # 1..100 ms
    assert stats["n"] == 100
    assert stats["p50_ms"] == pytest.approx(50.5)
    assert stats["p99_ms"] == pytest.approx(99.01)
    assert stats["max_ms"] == 100.0
    assert summarize_ns([]) == {"n": 0}


def _report(**over: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "config": {
            "upstream": "sim",
            "gateway_cpu": 0,
            "load_cpu": 1,
            "pinned": True,
            "rounds": 2,
            "duration": 1.0,
            "tp_rounds": 1,
        },
        "environment": {
            "cpu_model": "cpu",
            "cpus": 2,
            "python": "3.11",
            "git_commit": "abc",
            "gateway_dirty": False,
        },
        "latency": {
            "unary@1": {
                "mode": "unary",
                "concurrency": 1,
                "direct": {"n": 10, "p50_ms": 0.1, "p90_ms": 0.1, "p99_ms": 0.2, "errors": 0},
                "gateway": {"n": 10, "p50_ms": 0.4, "p90_ms": 0.5, "p99_ms": 0.9, "errors": 0},
                "added_p50_ms": 0.3,
                "added_p99_ms": 0.7,
            },
            "unary@8": {
                "mode": "unary",
                "concurrency": 8,
                "direct": {"n": 10, "p50_ms": 0.5, "p90_ms": 0.6, "p99_ms": 1.0, "errors": 0},
                "gateway": {"n": 10, "p50_ms": 1.5, "p90_ms": 2.0, "p99_ms": 3.5, "errors": 0},
                "added_p50_ms": 1.0,
                "added_p99_ms": 2.5,
            },
        },
        "throughput": {
            "unary": {
                "mode": "unary",
                "concurrency": 32,
                "tool": "wrk -t1",
                "runs": [],
                "direct_rps": 6000.0,
                "gateway_rps": 5600.0,
                "gateway_over_direct": 0.93,
                "gateway_best": None,
                "upstream_bound": True,
                "client_bound_possible": False,
            }
        },
        "memory": {"vmrss_mb": 60.0, "vmhwm_mb": 61.0},
        "warnings": [],
    }
    report.update(over)
    return report


def test_targets_pass_miss_and_missing_figures() -> None:
    report = _report()
    by_name = {t["name"]: t for t in evaluate_targets(report)}
    assert by_name["added P50, non-streaming, concurrency 1"]["status"] == "pass"
    assert by_name["added P99, non-streaming, concurrency 8"]["status"] == "MISS"
    unary_tp = by_name["throughput, non-streaming, concurrency 32"]
    assert unary_tp["status"] == "pass" and "upstream" in unary_tp["note"]
    assert by_name["throughput, streaming (8 chunks), concurrency 32"]["status"] == "n/a"
    assert by_name["peak RSS of the gateway worker (VmHWM)"]["status"] == "pass"
    assert len(by_name) == len(TARGETS)


def test_target_threshold_is_inclusive() -> None:
    at_limit = Target("x", ("memory", "vmhwm_mb"), "<=", 61.0, "MB")
    floor = Target("y", ("memory", "vmhwm_mb"), ">=", 61.0, "MB")
    statuses = [t["status"] for t in evaluate_targets(_report(), [at_limit, floor])]
    assert statuses == ["pass", "pass"]


def test_render_mentions_every_target_and_is_json_serializable() -> None:
    report = _report()
    report["targets"] = evaluate_targets(report)
    text = render(report)
    for t in TARGETS:
        assert t.name in text
    assert "MISS" in text
    json.dumps(report, allow_nan=False)


def test_parse_wrk_summary_line() -> None:
    out = (
        "Running 1s test\n"
        'WRK_JSON {"requests":1000,"duration_us":2000000,"connect":0,"read":0,"write":0,'
        '"status":10,"timeout":0,"p50_us":1500,"p90_us":2000,"p99_us":4000,"max_us":9000}\n'
    )
    r = parse_wrk(out)
    assert r["rps"] == 495.0  # non-2xx answers are not throughput
    assert r["errors"] == 10
    assert r["p99_ms"] == 4.0
    with pytest.raises(RuntimeError):
        parse_wrk("no summary")


def test_wrk_script_embeds_the_body(tmp_path: Path) -> None:
    body = request_body(stream=True)
    text = wrk_script(tmp_path / "s.lua", body).read_text()
    assert body.decode() in text
    assert "function done(summary, latency, requests)" in text


def test_request_body_fixes_the_answer_length() -> None:
    body = json.loads(request_body(stream=True))
    assert body["stream"] is True and body["ignore_eos"] is True and body["max_tokens"] == 8
    assert "stream" not in json.loads(request_body(stream=False))


def test_client_parser_handles_split_chunked_and_content_length() -> None:
    conn = _ClientConn()
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'f\r\ndata: {"a":1}\n\n\r\n'
        b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    )
    for i in range(len(chunked) - 1):
        conn._buf = bytearray(chunked[:i])
        conn._reset()
        assert not conn._parse()
    conn._buf = bytearray(chunked + b"HTTP/1.1 200 OK")  # the next response's bytes stay buffered
    conn._reset()
    assert conn._parse()
    assert bytes(conn._body) == b'data: {"a":1}\n\ndata: [DONE]\n\n'
    assert count_sse_events(bytes(conn._body)) == 1
    assert bytes(conn._buf) == b"HTTP/1.1 200 OK"

    conn._buf = bytearray(b"HTTP/1.1 429 Too Many\r\nContent-Length: 2\r\n\r\nok")
    conn._reset()
    assert conn._parse() and conn._status == 429 and bytes(conn._body) == b"ok"
