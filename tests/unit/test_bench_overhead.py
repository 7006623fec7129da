"""The pure parts of the overhead benchmark: statistics, parsing, target evaluation, rendering.

No timing is asserted here: the benchmark (eval/bench/overhead/) is a measuring command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.bench.overhead.client import _ClientConn, count_sse_events, raw_request, request_body
from eval.bench.overhead.limiter import (
    backend_phases,
    compare_latency,
    histogram_delta,
    parse_histogram,
    summarize_histogram,
    write_limiter_policy,
)
from eval.bench.overhead.measure import CoreUse, Endpoints, Side, rotated
from eval.bench.overhead.policy import write_policy
from eval.bench.overhead.report import (
    TARGETS,
    Target,
    evaluate_targets,
    percentile,
    render,
    render_limiter,
    summarize_ns,
)
from eval.bench.overhead.wrk import parse_wrk, wrk_script
from gateway.config import load_policy
from gateway.tenancy.keys import generate_key, hash_key


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


# -- the limiter comparison (issue 3) --------------------------------------------------------------


def test_policies_parse_spine_without_auth_and_limiter_with_redis_and_the_key(tmp_path: Path) -> None:
    spine = tmp_path / "spine.yaml"
    write_policy(spine, 9001)
    p = load_policy(spine)
    assert p.tenancy.auth == "disabled" and p.limits.backend == "memory"

    key = generate_key()
    lim = tmp_path / "limiter.yaml"
    write_limiter_policy(lim, 9001, hash_key(key))
    q = load_policy(lim)
    assert q.tenancy.auth == "required" and q.limits.backend == "redis"
    assert [k.sha256 for k in q.tenancy.keys] == [hash_key(key)]
    assert q.pools[0].endpoints == p.pools[0].endpoints


def test_requests_carry_the_extra_headers(tmp_path: Path) -> None:
    raw = raw_request(8000, b"{}", (("Authorization", "Bearer sk-x"),))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"\r\nAuthorization: Bearer sk-x\r\n" in head + b"\r\n" and body == b"{}"
    assert b"Authorization" not in raw_request(8000, b"{}")
    script = wrk_script(tmp_path / "s.lua", b"{}", (("Authorization", "Bearer sk-x"),)).read_text()
    assert 'wrk.headers["Authorization"] = "Bearer sk-x"' in script


def test_rotation_keeps_the_two_side_alternation() -> None:
    a, b, c = (Side(n, 1, 1) for n in ("direct", "gateway", "limiter"))
    assert [[s.name for s in rotated([a, b], r)] for r in range(3)] == [
        ["direct", "gateway"],
        ["gateway", "direct"],
        ["direct", "gateway"],
    ]
    firsts = [rotated([a, b, c], r)[0].name for r in range(6)]
    assert sorted(firsts) == ["direct", "direct", "gateway", "gateway", "limiter", "limiter"]


_METRICS = """\
# TYPE llmgw_ratelimit_backend_seconds histogram
llmgw_ratelimit_backend_seconds_bucket{le="0.0001"} 0.0
llmgw_ratelimit_backend_seconds_bucket{le="0.00025"} 10.0
llmgw_ratelimit_backend_seconds_bucket{le="0.0005"} 95.0
llmgw_ratelimit_backend_seconds_bucket{le="0.001"} 99.0
llmgw_ratelimit_backend_seconds_bucket{le="+Inf"} 100.0
llmgw_ratelimit_backend_seconds_count 100.0
llmgw_ratelimit_backend_seconds_sum 0.04
llmgw_other_bucket{le="0.1"} 7.0
"""


def test_backend_histogram_parse_delta_and_bucket_percentiles() -> None:
    h = parse_histogram(_METRICS)
    assert h["count"] == 100 and h["buckets"]["+Inf"] == 100
    s = summarize_histogram(h)
    assert s["mean_ms"] == pytest.approx(0.4)
    assert s["p50_le_ms"] == 0.5 and s["p99_le_ms"] == 1.0
    later = parse_histogram(_METRICS.replace(" 100.0", " 200.0").replace("0.04", "0.54"))
    d = summarize_histogram(histogram_delta(later, h))
    assert d["count"] == 100 and d["p50_le_ms"] is None  # the 100 new calls all landed in +Inf
    assert summarize_histogram(parse_histogram("")) == {"count": 0, "sum_s": 0.0, "buckets": {}}
    phases = backend_phases(h, later)
    assert phases["latency_phase"]["count"] == 100 and phases["throughput_phase"]["count"] == 100
    assert backend_phases({"error": "down"}, later)["latency_phase"] == {"error": "down"}


def test_limiter_comparison_target_and_render() -> None:
    report = _report()
    row8 = report["latency"]["unary@8"]
    row8["limiter"] = {"n": 10, "p50_ms": 2.0, "p90_ms": 3.0, "p99_ms": 4.2, "errors": 0}
    cmp = compare_latency(report["latency"])
    assert list(cmp) == ["unary@8"]  # unary@1 has no limiter side
    assert cmp["unary@8"]["delta_p99_ms"] == pytest.approx(0.7)
    assert cmp["unary@8"]["delta_p50_ms"] == pytest.approx(0.5)
    hist = {"latency_phase": summarize_histogram(parse_histogram(_METRICS)), "throughput_phase": {"count": 0}}
    report["limiter"] = {
        "latency": cmp,
        "backend_seconds": hist,
        "spine_backend_seconds": hist,
        "memory": {"vmrss_mb": 70.0, "vmhwm_mb": 71.0},
        "redis": "Redis server v=7.0",
    }
    report["throughput"]["unary"].update(limiter_rps=4000.0, limiter_best=None, limiter_over_spine=0.71)
    report["targets"] = evaluate_targets(report)
    by_name = {t["name"]: t for t in report["targets"]}
    limiter_target = by_name[LIMITER_TARGET]
    assert limiter_target["status"] == "pass" and limiter_target["threshold"] == 1.0
    assert limiter_target["note"] == ""  # no core figures: nothing to flag
    text = render(report)
    assert "Limiter comparison" in text and "+0.700" in text and "4,000 req/s" in text and "x0.71" in text
    assert "P99 <= 1.000 ms" in text
    json.dumps(report, allow_nan=False)
    assert evaluate_targets(_report(limiter=None))[-1]["status"] == "n/a"


LIMITER_TARGET = "limiter added P99 at c=8 (auth + Redis limiter - spine, non-streaming)"


def test_limiter_comparison_prefers_its_own_spine_and_flags_a_saturated_load_core() -> None:
    report = _report()
    row8 = report["latency"]["unary@8"]
    # The main gateway (over the simulator) is not the limiter's spine when a "spine" side exists.
    row8["spine"] = {"n": 10, "p50_ms": 1.0, "p99_ms": 1.5, "gateway_core_busy": 0.97, "load_core_busy": 0.6}
    row8["limiter"] = {
        "n": 10,
        "p50_ms": 1.4,
        "p99_ms": 2.0,
        "gateway_core_busy": 0.85,
        "load_core_busy": 0.66,
    }
    cmp = compare_latency(report["latency"])["unary@8"]
    assert cmp["spine_p99_ms"] == 1.5 and cmp["delta_p99_ms"] == pytest.approx(0.5)
    assert cmp["spine_gateway_core_busy"] == 0.97 and cmp["limiter_load_core_busy"] == 0.66
    report["limiter"] = {"latency": {"unary@8": cmp}}
    target = {t["name"]: t for t in evaluate_targets(report)}[LIMITER_TARGET]
    assert target["status"] == "pass" and target["note"] == ""
    text = "\n".join(render_limiter({"upstream": "static", "latency": {"unary@8": cmp}}, {}))
    assert "97%/60%" in text and "85%/66%" in text and "upstream of both: static" in text
    # The same delta with the load core saturated during the limiter's batches: still judged, but flagged.
    cmp["limiter_load_core_busy"] = 0.96
    target = {t["name"]: t for t in evaluate_targets(report)}[LIMITER_TARGET]
    assert target["status"] == "pass" and "load core 96% busy" in target["note"]


def test_sides_put_the_limiters_spine_before_the_limiter() -> None:
    direct, gw, spine, lim = (Side(n, i, i) for i, n in enumerate(("direct", "gateway", "spine", "limiter")))
    assert [s.name for s in Endpoints(direct, gw, 0, lim, spine).sides()] == [
        "direct",
        "gateway",
        "spine",
        "limiter",
    ]
    assert [s.name for s in Endpoints(direct, gw, 0, lim).sides()] == ["direct", "gateway", "limiter"]
    assert [s.name for s in Endpoints(direct, gw, 0, lim, spine).sides(with_limiter=False)] == [
        "direct",
        "gateway",
    ]


def test_sides_put_the_before_gateway_beside_ours_in_every_round() -> None:
    direct, gw, before, lim = (
        Side(n, i, i) for i, n in enumerate(("direct", "gateway", "before", "limiter"))
    )
    ep = Endpoints(direct, gw, 0, lim, before=before)
    assert [s.name for s in ep.sides()] == ["direct", "gateway", "before", "limiter"]
    assert [s.name for s in ep.sides(with_limiter=False)] == ["direct", "gateway", "before"]
    assert [s.name for s in rotated(ep.sides(with_limiter=False), 1)] == ["gateway", "before", "direct"]
    theirs = Side("before-limiter", 9, 9)
    ep = Endpoints(direct, gw, 0, lim, before=before, before_limiter=theirs)
    assert [s.name for s in ep.sides()] == ["direct", "gateway", "before", "limiter", "before-limiter"]
    assert [s.name for s in ep.sides(with_limiter=False)] == ["direct", "gateway", "before"]


def test_the_before_limiter_is_compared_with_the_same_spine() -> None:
    stats = {"n": 100, "p50_ms": 1.0, "p99_ms": 2.0}
    row = {
        "mode": "unary",
        "concurrency": 1,
        "gateway": stats,
        "limiter": {**stats, "p50_ms": 1.4, "p99_ms": 2.5},
        "before-limiter": {**stats, "p50_ms": 1.5, "p99_ms": 2.2},
    }
    cell = compare_latency({"unary@1": row})["unary@1"]
    assert (cell["delta_p50_ms"], cell["before_delta_p50_ms"]) == (0.4, 0.5)
    assert (cell["delta_p99_ms"], cell["before_delta_p99_ms"]) == (0.5, 0.2)


def test_core_use_sums_batches_per_core() -> None:
    use = CoreUse()
    use.add({0: (10, 100, 0), 1: (0, 100, 0)}, {0: (60, 200, 0), 1: (100, 200, 0)})
    use.add({0: (60, 200, 0), 1: (100, 200, 0)}, {0: (80, 300, 0), 1: (190, 300, 0)})
    assert use.share(0) == 0.35 and use.share(1) == 0.95
    assert use.share(None) is None and use.share(7) is None
