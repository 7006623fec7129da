"""`llmgw bench`: an LLM load generator for OpenAI-compatible endpoints (docs/design/014-load-generator.md).

workload.py  YAML workloads (frozen pydantic, unknown keys rejected)   plan.py  request content + arrivals
sse.py       incremental SSE parsing      client.py  one timed request (aiohttp)   runner.py  open/closed loop
stats.py     percentiles, goodput, knee   sweep.py   levels -> report              report.py  JSON + text
plot.py      PNGs (lazy matplotlib)       progress.py  stderr progress line      capacity.py  knee vs replicas
cli.py       `llmgw bench run|capacity`

Used from outside: `cli` (the `llmgw bench` entry point).
"""
