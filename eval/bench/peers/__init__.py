"""Peer benchmark (`make bench-peers`, `python -m eval.bench.peers`): our gateway next to LiteLLM proxy,
Portkey's gateway and a bare Python relay (the floor), on the same upstream and the same pinned core.

Sides: the static upstream directly (the reference), ours with auth + Redis limiter + metrics, ours with
routing on (`model: auto`), LiteLLM 1.108.7, Portkey 1.15.2 on Node, and the floor (`floor`: uvicorn +
one aiohttp session, a bare ASGI app). Each gateway runs under `taskset -c 0`; the load generator, the
upstream and Redis run on core 1. Rounds are interleaved (direct, A, B, C, ... then again), and every
"added" figure is a difference inside one round, reported as the median over rounds.

Modules: `configs` (policies and peer configs, pure), `floor` (the bare relay), `sides` (starting the
processes), `_sampler` (closed-loop batches with TTFT), `measure` (the rounds), `stats` (medians, added,
ratios, targets; pure), `report` (Markdown; pure), `run` (orchestration, CLI). Method and results:
docs/performance.md. Peers are installed by scripts/install-peers into .tools/peers.

Commands besides this one: `profile` (`python -m eval.bench.peers.profile`, where our gateway's time
goes under load, by cProfile) and `soak` (`make bench-soak`, the memory soak on the same sides).
"""
