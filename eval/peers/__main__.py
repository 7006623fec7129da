from __future__ import annotations

from eval.peers.run import main

raise SystemExit(main())
