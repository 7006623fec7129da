"""`python -m eval.overhead`: run the gateway-overhead benchmark."""

from eval.overhead.run import main

raise SystemExit(main())
