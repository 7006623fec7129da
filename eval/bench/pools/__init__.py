"""`python -m eval.bench.pools`: replica picking strategies compared on simulator replicas."""
