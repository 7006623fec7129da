"""The metrics of routed aliases that learn (exploration, outcome memory, live estimate, sharing
between replicas): declared by `Metrics`, kept here so that each module stays one screenful."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class LearningMetrics:
    def _declare_learning(self, r: CollectorRegistry) -> None:
        """Routed aliases that learn: exploration, the outcome memory, the live estimate."""
        self.router_explore = Counter(
            "llmgw_router_explore",
            "Exploration of cheap-routed requests by outcome: judged (a label was learnt), unjudged (the "
            "judge could not tell), budget (the gateway-owned budget refused it), busy (max_inflight "
            "reached), failed (the strong call failed)",
            ["model", "outcome"],
            registry=r,
        )
        self.router_explore_tokens = Counter(
            "llmgw_router_explore_tokens",
            "Tokens of exploration calls (strong answers and grader calls), charged to the org "
            "llmgw-explore, never to a tenant",
            ["model", "kind"],
            registry=r,
        )
        self.router_explore_cost = Counter(
            "llmgw_router_explore_cost_usd",
            "USD of exploration calls at the strong tier's price",
            ["model"],
            registry=r,
        )
        self.router_memory_outcomes = Gauge(
            "llmgw_router_memory_outcomes",
            "Outcomes held in a routed alias's outcome memory (this replica)",
            ["model"],
            registry=r,
        )
        self.router_memory_learnt = Counter(
            "llmgw_router_memory_learnt",
            "Outcomes learnt by a routed alias's memory by source (explore, cascade, feedback; shared: "
            "learnt by another replica, read from Redis)",
            ["model", "source"],
            registry=r,
        )
        self.router_quality_share = Gauge(
            "llmgw_router_quality_share",
            "Live estimate of the share of strong-only quality delivered (from the exploration sample of "
            "the last explore.window_s; bound=estimate|ci90_low|ci90_high; NaN without samples)",
            ["model", "bound"],
            registry=r,
        )
        self.router_cost_share_estimate = Gauge(
            "llmgw_router_cost_share_estimate",
            "Live estimate of the share of strong-only cost paid, exploration calls included",
            ["model"],
            registry=r,
        )
        self.router_explore_samples = Gauge(
            "llmgw_router_explore_samples",
            "Exploration samples in the live estimate's window",
            ["model"],
            registry=r,
        )

    def _declare_sharing(self, r: CollectorRegistry) -> None:
        """What routed aliases share between replicas through Redis."""
        self.router_outcome_share_errors = Counter(
            "llmgw_router_outcome_share_errors",
            "Failed Redis operations sharing outcomes between replicas (the local memory still learns)",
            registry=r,
        )
        self.router_calibration_share_errors = Counter(
            "llmgw_router_calibration_share_errors",
            "Failed Redis syncs of live-calibration sketches between replicas (each keeps its own)",
            registry=r,
        )
