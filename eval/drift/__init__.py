"""`llmgw drift`: do two pools serving the same weights still agree? (docs/design/026-drift-monitor.md)

A fixed canary prompt set goes greedily to both pools with token logprobs and top-k alternatives (and
vLLM's `prompt_logprobs` where the engine takes it); the comparison is `pools.drift.compare`, the same
pure function the gateway's background canary runs. `cli` parses flags, `targets` resolves what to call,
`run` does the HTTP, `report` writes report.json, the table and the plot.
"""
