"""Replica picking compared on simulator replicas (`make bench-pools`, `python -m eval.bench.pools`).

Two scenarios of issue 5 (docs/design/010): least_load vs round_robin with one 3x slower replica, and
prefix_affinity vs round_robin with 16 shared system prompts. `_scenarios` stages one run (fresh
simulators and gateway), `_load` offers the open-loop streaming load, `__main__` compares and reports.
The command is the package itself: no other package imports from it. `fair` (`python -m
eval.bench.pools.fair`) is the hold queue's benchmark of issue 42: a tenant offering 10x its share, two
at their share, FIFO against fair queuing.
"""
