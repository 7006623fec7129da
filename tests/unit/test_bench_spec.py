"""The speculative benchmark's fleet: every request is served and counted where it was routed, the
scrapes teach the gateway's TpotCurve, and the switching router follows the rule."""

from __future__ import annotations

from eval.bench.spec.__main__ import always, profiles, switching
from eval.bench.spec.fleet import Replica, arrivals, run
from eval.sim.engine import Engine, Sequence


def test_the_fleet_serves_every_arrival_where_it_was_routed() -> None:
    spec, plain = profiles(0.78, 3)
    work = arrivals(10, 3.0, seed=3)
    fleet = [Replica("spec", Engine(spec)), Replica("plain", Engine(plain))]
    out = run(fleet, always, work)
    assert out.sent == {"spec": len(work), "plain": 0}
    assert len(out.ttft) == len(work) and all(t >= 0 for t in out.ttft)
    assert fleet[0].engine.spec_stats.drafts > 0 and fleet[1].engine.spec_stats.drafts == 0
    assert fleet[0].curve.bins  # scraped every 0.5 s while it served


def test_switching_sends_to_plain_past_the_switch_point() -> None:
    spec, plain = profiles(0.78, 3)
    fleet = [Replica("spec", Engine(spec)), Replica("plain", Engine(plain))]
    route = switching(4.0, 0.5, {}, {})
    assert route(fleet, 0.0) == 0
    fleet[0].engine.running.extend(Sequence(10, [], 10, "length", 0.0) for _ in range(4))
    assert route(fleet, 0.0) == 1  # a running batch of 4 is the switch point
