"""Reaching pools: `calls.PoolCalls` (the replica's lease, attempts, retries before the first byte)
over one transport seam (`transport`: a `Request` value in, a `Reply` out, failures as the gateway's
`TransportError`s) and its transports: the lean HTTP/1.1 client (`h1`), aiohttp (`aio`), LiteLLM
in-process for hosted pools (`hosted`) and `MockTransport` for tests (`mock`); the per-pool client
(`pool_client`), failures and refusals as the caller's errors (`failures`), adapters loaded on demand
(`lora_loader`), the drift canary (`drift_canary`) and the process's clients (`clients`). SSE is read
by gateway.sse.
"""
