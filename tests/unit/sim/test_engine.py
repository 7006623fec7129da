"""Continuous-batching engine on a virtual clock: latency model, prefix cache, capacity, preemption."""

from __future__ import annotations

from eval.sim.engine import Engine, Sequence, Status
from eval.sim.profile import SimProfile
from eval.sim.tokenizer import block_hashes, tokenize

SMALL = SimProfile(step_base_ms=8.0, prefill_per_token_ms=0.1, decode_per_seq_ms=0.15, max_model_len=8192)


def seq(text: str, output_len: int, arrival: float = 0.0, block_size: int = 16) -> Sequence:
    pieces = tokenize(text)
    return Sequence(len(pieces), block_hashes(pieces, block_size), output_len, "stop", arrival)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i % 97}" for i in range(n))


def run(engine: Engine, arrivals: list[Sequence], observe: list[tuple[int, int]] | None = None) -> float:
    """Step until idle; sequences join WAITING when the virtual clock reaches their arrival time."""
    pending = sorted(arrivals, key=lambda s: s.arrival)
    now = 0.0
    while pending or engine.has_work:
        while pending and pending[0].arrival <= now:
            engine.add(pending.pop(0))
        if not engine.has_work:
            now = pending[0].arrival
            continue
        out = engine.step(now)
        assert out.progressed, "a step with work must make progress"
        if observe is not None:
            observe.append((len(engine.waiting), engine.stats.num_preemptions))
        now += out.duration
    return now


def ttft(s: Sequence) -> float:
    assert s.first_token_time is not None
    return s.first_token_time - s.arrival


def tpot(s: Sequence) -> float:
    assert s.first_token_time is not None
    return (s.last_token_time - s.first_token_time) / (s.num_emitted - 1)


def test_ttft_grows_with_uncached_prompt_length() -> None:
    short, long = seq(words(50, "a"), 4), seq(words(2000, "b"), 4)
    run(Engine(SMALL), [short])
    run(Engine(SMALL), [long])
    assert ttft(long) > ttft(short) + 0.1  # ~4000 more tokens x 0.1 ms


def test_shared_prefix_lowers_ttft_and_counts_hits() -> None:
    engine = Engine(SMALL)
    system = words(1500, "sys")
    first = seq(system + " first question", 4)
    second = seq(system + " another question", 4, arrival=1.0)
    run(engine, [first, second])
    assert first.cached_tokens == 0
    assert second.cached_tokens > 0.9 * first.prompt_len
    assert ttft(second) < ttft(first) / 3
    assert engine.stats.prefix_cache_hits == second.cached_tokens
    assert engine.stats.prefix_cache_queries == first.prompt_len + second.prompt_len


def test_prefix_cache_disabled_gives_no_hits() -> None:
    engine = Engine(SMALL.model_copy(update={"enable_prefix_caching": False}))
    system = words(500, "sys")
    a, b = seq(system + " x", 2), seq(system + " y", 2, arrival=1.0)
    run(engine, [a, b])
    assert b.cached_tokens == 0 and engine.stats.prefix_cache_hits == 0


def test_tpot_grows_with_batch_size() -> None:
    alone = seq(words(20, "q"), 50)
    run(Engine(SMALL), [alone])
    batch = [seq(words(20, f"q{i}_"), 50) for i in range(64)]
    run(Engine(SMALL), batch)
    assert min(tpot(s) for s in batch) > tpot(alone) * 1.5  # 64 x 0.15 ms on top of 8 ms


def test_over_capacity_builds_queue_and_preempts() -> None:
    profile = SimProfile(step_base_ms=1.0, kv_capacity_tokens=2048, block_size=16, max_model_len=1024)
    engine = Engine(profile)
    seqs = [seq(words(100, f"p{i}_"), 300) for i in range(16)]
    observed: list[tuple[int, int]] = []
    run(engine, seqs, observed)
    assert max(w for w, _ in observed) > 0, "requests must queue when KV is full"
    assert engine.stats.num_preemptions > 0
    assert all(s.status is Status.FINISHED and s.num_emitted == 300 for s in seqs)
    assert engine.stats.generation_tokens == 16 * 300
    assert engine.stats.finished["stop"] == 16
    assert engine.kv_usage == 0.0 and not engine.running and not engine.waiting


def test_max_num_seqs_caps_running_batch() -> None:
    engine = Engine(SimProfile(step_base_ms=1.0, max_num_seqs=4))
    for i in range(10):
        engine.add(seq(words(10, f"m{i}_"), 5))
    engine.step(0.0)
    assert len(engine.running) == 4 and len(engine.waiting) == 6


def test_abort_frees_kv_and_is_not_a_finished_request() -> None:
    engine = Engine(SMALL)
    a = engine.add(seq(words(300, "a"), 100))
    b = engine.add(seq(words(300, "b"), 100))
    engine.step(0.0)
    assert engine.kv_usage > 0
    engine.abort(a, 0.1)
    engine.abort(b, 0.1)
    engine.abort(b, 0.2)  # idempotent
    assert engine.kv_usage == 0.0 and not engine.has_work
    # vLLM 0.32: a client abort moves neither request_success_total nor the e2e histogram.
    assert engine.stats.finished["abort"] == 0 and a.finished_reason == "abort"
    assert engine.stats.e2e.count == 0


def test_abort_waiting_request() -> None:
    engine = Engine(SimProfile(step_base_ms=1.0, max_num_seqs=1))
    engine.add(seq("a b c", 5))
    waiting = engine.add(seq("d e f", 5))
    engine.step(0.0)
    engine.abort(waiting, 0.0)
    assert not engine.waiting and engine.stats.finished["abort"] == 0 and waiting.finished


def test_complete_now_counts_everything() -> None:
    engine = Engine(SimProfile())
    s = seq(words(100, "z"), 7)
    engine.complete_now(s, 5.0)
    again = seq(words(100, "z"), 7)
    engine.complete_now(again, 6.0)
    st = engine.stats
    assert s.finished and s.num_emitted == 7
    assert st.generation_tokens == 14 and st.prompt_tokens == 2 * s.prompt_len
    assert again.cached_tokens > 0 and st.prefix_cache_hits == again.cached_tokens
    assert st.finished["stop"] == 2 and st.ttft.count == 2 and st.itl.count == 12
    assert engine.kv_usage == 0.0
