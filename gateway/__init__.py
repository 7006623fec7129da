"""HTTP edge of the LLM gateway: OpenAI-compatible API, relay to model pools, metrics, CLI."""

from __future__ import annotations

__version__ = "0.2.0"
