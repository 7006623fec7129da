"""Histogram buckets the gateway's latency metrics share (a module of its own: `metrics` composes the
per-feature metric sets, which use them too)."""

__all__ = ["E2E_BUCKETS", "OVERHEAD_BUCKETS", "TPOT_BUCKETS", "TTFT_BUCKETS"]

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 40, 80)
TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1)
E2E_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.05)
