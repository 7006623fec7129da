"""The `make bench-*` benchmarks: measuring commands with reports, never tests (design §9, §10).

- `overhead`: the latency, throughput and memory the gateway adds to its upstream (`bench-overhead`),
  and the CPU of the observability hooks (`bench-observe`);
- `pools`: replica-picking strategies on simulator replicas (`bench-pools`);
- `peers`: ours next to LiteLLM, Portkey and a bare relay (`bench-peers`), the memory soak
  (`bench-soak`) and a cProfile run;
- `cache`: cache lookup latency on Redis Stack (`bench-cache`) and the semantic threshold
  (`semantic-threshold`, with its paraphrase data);
- `procs`: the one process helper they share (free ports, starting a server pinned to a core, waiting
  until it answers, stopping it, the core choice, a throw-away Redis).

`make bench-router` (eval/routing/bench_serving.py) and `make bench-knee` / `bench-capacity` (`llmgw
bench`, eval/loadgen/) run product commands and live with them.
"""
