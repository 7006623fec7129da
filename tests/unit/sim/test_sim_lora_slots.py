"""LoRA in the simulator: GPU slots (LRU), the scheduler's max_loras rule, swap cost, the info gauge."""

from __future__ import annotations

import pytest

from eval.sim.engine import Engine, Sequence
from eval.sim.lora import EngineLora, InFlight, InfoHistory, LoraSettings, LoraSlots
from eval.sim.profile import SimProfile
from eval.sim.tokenizer import block_hashes, tokenize

STEP = SimProfile(step_base_ms=10.0, max_model_len=4096)


def seq(lora: str | None, output_len: int = 3, text: str = "hello there", arrival: float = 0.0) -> Sequence:
    pieces = tokenize(text)
    return Sequence(len(pieces), block_hashes(pieces, 16), output_len, "stop", arrival, lora=lora)


def engine(max_loras: int = 2, swap_ms: float = 30.0, clock: float = 0.0) -> Engine:
    return Engine(STEP, EngineLora(LoraSettings(max_loras, 16, swap_ms), clock=lambda: clock))


def drain(e: Engine, now: float = 0.0) -> float:
    while e.has_work:
        now += e.step(now).duration
    return now


# --- slots ---------------------------------------------------------------------------------------
def test_slots_fill_free_slots_then_evict_the_least_recently_used() -> None:
    slots = LoraSlots(2)
    assert slots.activate(["a"]) == 1 and slots.activate(["b"]) == 1
    assert slots.activate(["a"]) == 0  # resident: no swap, and a is now the most recent
    assert slots.activate(["c"]) == 1  # evicts b (least recently used), not a
    assert list(slots.loaded) == ["a", "c"]
    assert slots.activate(["b"]) == 1 and list(slots.loaded) == ["c", "b"]
    assert slots.swaps == 4


def test_slots_never_evict_an_adapter_the_batch_uses() -> None:
    slots = LoraSlots(2)
    slots.activate(["a", "b"])
    slots.activate(["b"])  # a is now the LRU
    assert slots.activate(["a", "c"]) == 1  # a stays (in the batch), b goes although a is older
    assert set(slots.loaded) == {"a", "c"}
    with pytest.raises(ValueError):
        slots.activate(["a", "b", "c"])


def test_fits_allows_a_resident_adapter_or_a_free_batch_place() -> None:
    assert LoraSlots.fits({"a", "b"}, "a", 2)
    assert not LoraSlots.fits({"a", "b"}, "c", 2)
    assert LoraSlots.fits({"a"}, "c", 2)


def test_in_flight_keeps_first_seen_order_and_forgets_idle_adapters() -> None:
    f = InFlight()
    for name in ("b", "a", "b"):
        f.add(name)
    assert f.label() == "b,a"
    f.remove("b")
    assert f.label() == "b,a"
    f.remove("b")
    f.add("b")  # came back: goes to the end, like vLLM's dict
    assert f.label() == "a,b"


def test_info_history_moves_a_label_set_to_the_newest_time_and_is_bounded() -> None:
    t = iter(range(100))
    h = InfoHistory(clock=lambda: float(next(t)), keep=3)
    for label in ("a", "b", "a", "c", "d"):
        h.record(label, label)
    assert list(h.samples.items()) == [(("a", "a"), 2.0), (("c", "c"), 3.0), (("d", "d"), 4.0)]


# --- engine ----------------------------------------------------------------------------------------
def test_a_third_adapter_waits_until_a_batch_slot_frees_and_others_pass_it() -> None:
    e = engine(max_loras=2)
    a, b, c, a2 = seq("a", 5), seq("b", 5), seq("c", 2), seq("a", 2)
    for s in (a, b, c, a2):
        e.add(s)
    e.step(0.0)
    # c is skipped (2 adapters in the batch), a2 behind it still joins: vLLM's scheduler scans on.
    assert {s.lora for s in e.running} == {"a", "b"} and a2 in e.running and list(e.waiting) == [c]
    drain(e)
    assert a.first_token_time is not None and c.first_token_time is not None
    assert c.first_token_time > a.first_token_time
    assert c.finished and e.lora is not None and e.lora.slots.swaps == 3


def test_swaps_are_charged_to_the_step_that_needs_them() -> None:
    e = engine(max_loras=1, swap_ms=30.0)
    e.add(seq("a", 1))
    first = e.step(0.0)
    assert first.duration == pytest.approx(0.040)  # 10 ms step + one 30 ms swap
    e.add(seq("a", 1))
    assert e.step(1.0).duration == pytest.approx(0.010)  # resident: no swap
    e.add(seq(None, 1))
    assert e.step(2.0).duration == pytest.approx(0.010)  # the base model needs no slot
    e.add(seq("b", 1))
    assert e.step(3.0).duration == pytest.approx(0.040)
    assert e.lora is not None and e.lora.slots.swaps == 2


def test_base_requests_are_not_limited_by_max_loras() -> None:
    e = engine(max_loras=1)
    for s in (seq("a", 4), seq(None, 4), seq(None, 4), seq("b", 4)):
        e.add(s)
    e.step(0.0)
    assert len(e.running) == 3 and [s.lora for s in e.waiting] == ["b"]


def test_info_gauge_lists_in_flight_adapters_in_both_labels_then_empties() -> None:
    e = engine(max_loras=1)
    for s in (seq("a", 3), seq("b", 3)):
        e.add(s)
    e.step(0.0)
    assert e.lora is not None
    # b waits and a runs, yet vLLM 0.32 puts both in both labels.
    assert list(e.lora.info.samples) == [("a,b", "a,b")]
    drain(e)
    assert list(e.lora.info.samples)[-1] == ("", "")


def test_abort_frees_the_adapter_for_the_info_gauge() -> None:
    e = engine()
    s = seq("a", 50)
    e.add(s)
    e.step(0.0)
    e.abort(s, 0.1)
    assert e.lora is not None and e.lora.in_flight.label() == ""


def test_instant_engine_counts_swaps_without_latency() -> None:
    e = Engine(SimProfile(), EngineLora(LoraSettings(1, 16, 30.0)))
    for name in ("a", "a", "b", "a"):
        s = seq(name, 2)
        e.complete_now(s, 0.0)
        assert s.first_token_time == 0.0
    assert e.lora is not None and e.lora.slots.swaps == 3
