"""`python -m eval.bench.peers.soak` (`make bench-soak`): the memory soak."""

from __future__ import annotations

from eval.bench.peers.soak.run import main

raise SystemExit(main())
