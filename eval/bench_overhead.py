"""`python -m eval.bench_overhead` (what `make bench-overhead` runs); the code is in eval/overhead/."""

from __future__ import annotations

from eval.overhead.run import main

if __name__ == "__main__":
    raise SystemExit(main())
