"""The drift canary's series: `llmgw_pool_drift_*{a, b}`, one set per configured pool pair.

Labels are the pair's two pool names (bounded by the policy). The gauges hold the last successful
check; `llmgw_pool_drift_checks_total{outcome}` counts checks (`ok`, `failed`: a pool unreachable,
an error answer, or an answer without logprobs), and `..._last_check_timestamp_seconds` says how old
the gauges are, so a canary that stopped succeeding is visible rather than frozen at its last value.
`llmgw_pool_drift_exceeded` is 1 while the last check breached the pair's configured bound: the
alert `LLMGatewayPoolDrift` reads it, so the bound lives in one place (the policy).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from pools.drift import Summary

_PAIR = ["a", "b"]


class DriftGauges:
    def __init__(self, r: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"llmgw_pool_drift_{name}", doc, _PAIR, registry=r)

        self.match_ratio = gauge("match_ratio", "Share of canary prompts whose greedy continuations agree")
        self.mean_abs_logprob = gauge(
            "mean_abs_logprob", "Mean |delta logprob| of the chosen token over the shared prefixes"
        )
        self.max_abs_logprob = gauge("max_abs_logprob", "Largest |delta logprob| over the shared prefixes")
        self.kl = gauge("kl", "Mean top-k KL(a||b) estimate over the comparable positions")
        self.topk_overlap = gauge("topk_overlap", "Mean Jaccard overlap of the two pools' top-k tokens")
        self.first_divergence = gauge(
            "first_divergence_tokens",
            "Earliest position at which a canary continuation diverged (max_tokens when none did)",
        )
        self.exceeded = gauge("exceeded", "1 while the last check breached the pair's configured bound")
        self.last_check = gauge("last_check_timestamp_seconds", "Unix time of the last successful check")
        self.checks = Counter(
            "llmgw_pool_drift_checks",
            "Drift checks of a pool pair, by outcome",
            [*_PAIR, "outcome"],
            registry=r,
        )

    def record(
        self, a: str, b: str, s: Summary, breached: tuple[str, ...], max_tokens: int, now: float
    ) -> None:
        self.match_ratio.labels(a, b).set(s.match_ratio)
        self.mean_abs_logprob.labels(a, b).set(s.mean_abs_logprob)
        self.max_abs_logprob.labels(a, b).set(s.max_abs_logprob)
        self.kl.labels(a, b).set(s.kl)
        self.topk_overlap.labels(a, b).set(s.topk_overlap)
        first = s.first_divergence if s.first_divergence is not None else max_tokens
        self.first_divergence.labels(a, b).set(first)
        self.exceeded.labels(a, b).set(1 if breached else 0)
        self.last_check.labels(a, b).set(now)
        self.checks.labels(a, b, "ok").inc()

    def failed(self, a: str, b: str) -> None:
        self.checks.labels(a, b, "failed").inc()
