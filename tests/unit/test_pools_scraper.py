"""The scraper against an in-process transport: fresh load lands on the replica, a failed scrape
keeps the last load (which then ages out in the picker) and never touches the breaker."""

from __future__ import annotations

import httpx

from pools.breaker import Breaker, State
from pools.replica import Replica
from pools.scraper import Scraper, httpx_fetch

PAGE = 'vllm:num_requests_waiting{model_name="m"} 4\nvllm:kv_cache_usage_perc{model_name="m"} 0.5\n'


async def test_scrape_sets_load_and_failures_keep_the_last_one() -> None:
    up = {"http://a:1": True, "http://b:1": True}

    def handler(request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        if not up[base]:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=PAGE if base == "http://a:1" else "# not vllm\n")

    replicas = [Replica("http://a:1", Breaker(1, 10)), Replica("http://b:1", Breaker(1, 10))]
    now = [100.0]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        scraper = Scraper(lambda: replicas, httpx_fetch(client), interval_s=0.5, clock=lambda: now[0])
        await scraper.scrape_all()
        a, b = replicas
        assert a.load is not None and (a.load.waiting, a.load.kv_usage, a.load.at) == (4, 0.5, 100.0)
        assert b.load is None  # not a vLLM page: no load, no error
        up["http://a:1"] = False
        now[0] = 200.0
        await scraper.scrape_all()
    assert a.load is not None and a.load.at == 100.0 and a.scrape_failures == 1
    assert a.fresh_load(200.0, stale_after=3.0) is None  # aged out for the picker
    assert a.breaker.state is State.CLOSED
