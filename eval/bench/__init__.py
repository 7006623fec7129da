"""The `make bench-*` benchmarks: reports, never tests (design §9, §10).

`overhead` (gateway-added latency, throughput and memory; `bench-overhead`, `bench-observe`), `pools`
(replica picking on simulator replicas; `bench-pools`), `peers` (ours next to LiteLLM, Portkey and a bare
relay, and the memory soak; `bench-peers`, `bench-soak`), `cache` (cache lookup latency and the semantic
threshold; `bench-cache`, `semantic-threshold`); `procs` starts, waits for, pins and stops the processes
they measure. Nothing outside eval/bench imports this package.
"""
