"""`python -m eval.bench_pools`: replica picking strategies compared on simulator replicas."""
