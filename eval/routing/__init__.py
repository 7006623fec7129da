"""Routing evaluation: outcome data, RouteLLM metrics, baseline routers and plots (design doc 006)."""

from __future__ import annotations
