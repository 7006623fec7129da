"""The documented guarantee, checked on the memory backend with a fake clock and random traffic:

for every 12 consecutive sub-windows, the usage settled in them is <= the limit, provided each request's
usage is <= its reservation (admission + top-ups). Gateways that die (never settle) are part of the mix.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import SUB_WINDOWS, Admission, Dimension, Level, Reservation, Rule

LIMIT = 1000
LEASE_S = 30.0
SUB_S = 5.0

op = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 600)),
    st.tuples(st.just("top_up"), st.integers(0, 50), st.integers(1, 300)),
    st.tuples(st.just("settle"), st.integers(0, 50), st.sampled_from([1.0, 1.0, 0.9, 0.5, 0.0])),
    st.tuples(st.just("die"), st.integers(0, 50)),
    # Below the lease (live requests renew after each step); several steps cross sub-windows and windows.
    st.tuples(st.just("advance"), st.sampled_from([0.5, 2.0, 5.0, 12.0, 20.0])),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=80))
def test_settled_usage_of_any_window_stays_within_limit(ops: list[tuple[object, ...]]) -> None:
    # A plain function running its own loop: each example is one independent scenario.
    asyncio.run(scenario(ops))


async def scenario(ops: list[tuple[object, ...]]) -> None:
    clock = Clock()
    lim = MemoryBackend(lease_s=LEASE_S, sub_window_s=SUB_S, clock=clock, epoch_offset_s=0.0)
    rule = Rule(Level.ORG, "acme", Dimension.TOKENS, LIMIT)
    live: list[Reservation] = []
    charged: dict[int, int] = defaultdict(int)  # sub-window -> usage settled in it
    admitted = 0
    for n, (kind, *args) in enumerate(ops):
        if kind == "admit":
            d = await lim.admit(Admission(f"r{n}", (rule,), {Dimension.TOKENS: int(args[0])}))  # type: ignore[call-overload]
            if d.allowed and d.reservation is not None:
                live.append(d.reservation)
                admitted += 1
        elif kind == "top_up" and live:
            await lim.top_up(live[int(args[0]) % len(live)], {Dimension.TOKENS: int(args[1])})  # type: ignore[call-overload]
        elif kind == "settle" and live:
            res = live.pop(int(args[0]) % len(live))  # type: ignore[call-overload]
            used = int(res.reserved[Dimension.TOKENS] * float(args[1]))  # type: ignore[arg-type]
            await lim.settle(res, {Dimension.TOKENS: used})
            charged[int(clock() * 1000) // int(SUB_S * 1000)] += used
        elif kind == "die" and live:
            live.pop(int(args[0]) % len(live))  # type: ignore[call-overload]
        elif kind == "advance":
            clock.now += float(args[0])  # type: ignore[arg-type]
            await lim.renew(live)
    for end in charged:
        window = sum(charged.get(s, 0) for s in range(end - SUB_WINDOWS + 1, end + 1))
        assert window <= LIMIT, (end, dict(charged))
