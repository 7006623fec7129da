"""Where a request goes: routes (an alias on a pool), the alias -> route table and a routed alias's
decision (`table`), routed aliases' policies and models (`aliases`), and the cascade runner.
"""

from __future__ import annotations

from gateway.routing.table import Decided, Routes

__all__ = ["Decided", "Routes"]
