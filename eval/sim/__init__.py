"""`llmgw sim`: an OpenAI-compatible server that behaves like one vLLM replica.

Flow: `cli` parses flags and a profile into a `SimConfig`, `server.build_app` wires the pure pieces
(`tokenizer`, `textgen`, `replay`, `engine` + `kvcache`, `stats`) to ASGI, and `runner` drives the engine's
discrete steps in real time. The engine never does I/O, so the unit tests drive it with a virtual clock.
With `--enable-lora`, `adapters` holds the registered adapters (vLLM's load/unload routes) and `lora`
the engine's GPU slots (LRU, swap cost, the `max_loras` scheduling rule).
See docs/design/002-simulator.md.

Used from outside: `cli` (the `llmgw sim` entry point) and `profile` (`llmgw bench capacity` loads
simulator profiles).
"""
