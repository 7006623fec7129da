from __future__ import annotations

from eval.bench.peers.run import main

raise SystemExit(main())
