"""Reaching pools: `PoolCalls` (replica picking, attempts, retries before the first byte) over one
transport Protocol (`transport`: the lean HTTP/1.1 client of `h1`, and aiohttp), the per-pool client
(`pool_client`), failure classification (`failures`), the SSE splitter (`sse`), the LiteLLM bridge
for hosted pools (`hosted`) and the process's clients (`clients`).
"""
