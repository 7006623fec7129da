"""`make bench-lora`: adapter-aware replica picking vs round robin on simulator replicas serving LoRA.

8 adapters with Zipf popularity, 2 `llmgw sim --enable-lora --max-loras 2` replicas that charge a swap
cost, one gateway per side (fresh replicas each): mean and P99 TTFT (client-side, streamed) and adapter
swaps per 1,000 requests (the simulators' `sim:lora_swaps_total`). See `__main__.py`.
"""
