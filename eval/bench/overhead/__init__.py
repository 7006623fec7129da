"""Gateway-overhead benchmark: the latency, throughput and memory the gateway adds to its upstream.

`python -m eval.bench.overhead` (`make bench-overhead`) starts an upstream
(the simulator with the `instant` profile, or the canned static server of `static_upstream`) and a gateway
worker pinned on its own core, then measures the same request sent directly to the upstream and through
the gateway (docs/design/003):

* latency at concurrency 1, 8 and 32, non-streaming and streaming (8 output tokens), with direct and
  gateway batches interleaved in rounds so that machine noise lands on both sides alike;
* throughput at concurrency 32 with `wrk` (a C load generator) when installed, else the Python client;
  the upstream alone is measured the same way, so a figure capped by the upstream shows as such;
* the gateway's RSS (VmRSS, VmHWM) after the load;
* issue 3, unless `--no-limiter`: a second gateway with auth + the Redis limiter (and a throw-away
  redis-server), interleaved with the spine gateway on the same core at concurrency 1 and 8 and in the
  throughput runs; delta = limiter - spine, and the admission call's histogram from `/metrics`.

It prints a table, writes every figure plus the environment to a JSON file, and marks each target of
the issue as pass or miss. It is a measuring command, never a test: nothing here asserts a timing.

Modules: `client` (the request, a raw keep-alive HTTP client, samplers), `static_upstream`, `policy`
(the spine gateway's), `probes` (/proc: RSS, CPU time, core busy), `wrk`, `measure` (latency rounds,
throughput runs), `limiter` (its policy, the comparison), `report` (percentiles, targets, rendering),
`run` (orchestration, CLI). Processes are started, pinned and stopped by eval/bench/procs.py.
`python -m eval.bench.overhead --serve-static PORT` runs the static upstream alone (the peers use it).

Used from outside: `client`, `limiter`, `probes`, `report`, `run` (`environment`) and `wrk` by the peer
benchmark; `observe_cost` is `make bench-observe`.
"""
