"""`make bench-spec`: speculative, plain and switching routing of one alias, on the simulator's engine.

See `eval/bench/spec/__main__.py` for the run and docs/design/027-speculative-pools.md for the model.
"""
