"""Memory soak (issue 9, `make bench-soak`, `python -m eval.bench.peers.soak`): our gateway's RSS under its
max sustained load, for `--minutes` (default 10).

Target: RSS grows < 5 % between the end of minute 1 (after warm-up) and the end of the run (no leak),
and stays <= 300 MB per worker without the router model loaded. Set-up as in the peer benchmark: the
static upstream and Redis on the load core, ours with auth + Redis limiter + metrics (`ours_policy`,
one worker, so the server pid is the worker) on the gateway core, wrk at concurrency 32 in alternating
unary and streaming runs of `--chunk-seconds`. A thread reads /proc/<pid>/status (VmRSS, RssAnon) and
/proc/<pid>/smaps_rollup (PSS, USS) every `--sample-seconds`; requests served come from wrk's summaries,
interpolated inside a run, so RSS can be read against requests too. `--routed` soaks the routed config
(router model loaded) afterwards, for information only: the 300 MB target excludes the model.

Output: bench-results/soak-<time>.json and soak-<time>.png (RSS over time and over requests) and a short
table. Modules: `memory` (/proc parsing, the sampling thread), `figures` (requests by time, growth, the
leak slope, the verdict; pure), `report` (the plot and the table), `run` (the soak and the CLI). The
pure parts are unit-tested in tests/unit/test_peers_soak.py. The command is the package itself: no
other package imports from it.
"""
