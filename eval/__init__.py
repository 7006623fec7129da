"""Evaluation: product tools and pipelines only (design §2, §9).

- `sim`: `llmgw sim`, the vLLM-compatible simulator (also the image's `sim` target);
- `loadgen`: `llmgw bench`, the load generator (workload files in eval/workloads/);
- `bench`: the `make bench-*` benchmarks (overhead, pools, peers and the memory soak, cache);
- `routing`: building and evaluating the router and cascade artifacts (`llmgw router`, `llmgw cascade`,
  `make router-encoder`, `make bench-router`).

Nothing in the production runtime imports this package, and the gateway image does not carry it; its
commands reach the `llmgw` CLI through the `llmgw.commands` entry-point group. Each package's docstring
names the modules other packages and commands use (entry points, `python -m` targets, imports from a
sibling package); its `__init__` imports nothing (no package facade, docs/design/018-layout.md):
`llmgw` imports the entry-point modules at start-up, and an `__init__` that loaded more would slow
every command down.
"""
