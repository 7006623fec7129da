"""The edge's protocol for `llmgw serve --workers N`: uvicorn's worker processes import it by name.

Its limits come from the worker's environment (`LLMGW_*`, which the parent sets from its resolved
settings), read once when a worker imports this module.
"""

from __future__ import annotations

from gateway.edge.protocol import guarded_protocol
from gateway.edge.server import edge_limits
from gateway.settings import Settings

WorkerProtocol = guarded_protocol(edge_limits(Settings()))
