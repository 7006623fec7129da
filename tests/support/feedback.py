"""A `Feedback` (one pool `p`) sharing its delivered answers through a Redis client, real or fake."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gateway.config import parse_policy
from gateway.observability.cost import CostMetrics
from gateway.observability.feedback import Feedback, FeedbackStore
from gateway.observability.feedback_shared import SharedFeedback


def shared_feedback(client: Any) -> Feedback:
    """Its own registry, a 60 s TTL, 100 local entries and the key prefix `t:`."""
    reg = CollectorRegistry()
    policy = parse_policy(
        'pools: [{name: p, model: p, endpoints: {static: ["http://127.0.0.1:1"]}}]\n'
        "models: [{name: p, route: {pool: p}}]\n",
        "t",
    )
    fb = Feedback(FeedbackStore(60.0, 100), CostMetrics(policy, reg), reg)
    fb.share(SharedFeedback(client, 60.0, reg, "t:"))
    return fb
