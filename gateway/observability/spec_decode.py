"""Per-pool speculative-decoding acceptance, read at scrape time (docs/design/027-speculative-pools.md).

Computed from the increase of the pool's scraped vLLM spec-decode counters over the pool's
`speculative.acceptance_window_s` (`pools.spec_decode`). A pool gets series only while its engine
proposed drafts in that window: 0/0 is no acceptance figure, and a made-up 0 would read as "drafts
never accepted" on a dashboard or to the speculative routing rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pools.pool import ReplicaPool


class SpecDecodeCollector(Collector):
    def __init__(self, pools: Mapping[str, ReplicaPool], clock: Callable[[], float] = time.monotonic) -> None:
        self._pools = pools
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        ratio = GaugeMetricFamily(
            "llmgw_pool_spec_acceptance_ratio",
            "Accepted / proposed draft tokens of the pool's speculative decoding over its acceptance window",
            labels=["pool"],
        )
        length = GaugeMetricFamily(
            "llmgw_pool_spec_mean_acceptance_length",
            "Tokens per verification step (1 + accepted / drafts) over the pool's acceptance window",
            labels=["pool"],
        )
        position = GaugeMetricFamily(
            "llmgw_pool_spec_position_acceptance",
            "Share of drafts whose token at this position was accepted, over the acceptance window",
            labels=["pool", "position"],
        )
        drafts = GaugeMetricFamily(
            "llmgw_pool_spec_window_drafts", "Draft rounds in the acceptance window", labels=["pool"]
        )
        proposed = GaugeMetricFamily(
            "llmgw_pool_spec_window_draft_tokens", "Draft tokens in the acceptance window", labels=["pool"]
        )
        accepted = GaugeMetricFamily(
            "llmgw_pool_spec_window_accepted_tokens",
            "Accepted draft tokens in the acceptance window",
            labels=["pool"],
        )
        now = self._clock()
        for name, pool in self._pools.items():
            f = pool.spec_figures(now)
            if f is None:
                continue
            ratio.add_metric([name], f.acceptance_ratio)
            length.add_metric([name], f.mean_acceptance_length)
            for i, share in enumerate(f.position_acceptance):
                position.add_metric([name, str(i)], share)
            drafts.add_metric([name], f.increase.drafts)
            proposed.add_metric([name], f.increase.draft_tokens)
            accepted.add_metric([name], f.increase.accepted)
        yield from (ratio, length, position, drafts, proposed, accepted)
