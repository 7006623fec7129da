"""`python -m eval.bench.overhead`: run the gateway-overhead benchmark."""

from eval.bench.overhead.run import main

raise SystemExit(main())
