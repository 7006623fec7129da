"""Offline and load evaluation: the vLLM-compatible simulator, load generation, routing metrics.

Nothing in the production runtime imports this package (design §2); its commands reach the `llmgw`
CLI through the `llmgw.commands` entry-point group.
"""

from __future__ import annotations
