"""A tiny random-weight Llama for the real-vLLM tests, built offline and deterministically.

Nothing comes from a model hub: a byte-level BPE tokenizer is trained on Python standard-library sources
(local text on every machine), and a 2-layer `LlamaForCausalLM` (head size 32: the CPU attention backend
supports 32, 64, 80, ... and not 16) gets weights from a fixed seed, saved in bf16, plus three random peft
LoRA adapters (`lora-a`, `lora-b`, `lora-c`: one rank-8 recipe, a seed each). `recipe.py` holds every
input that shapes the output; its digest keys the cache under `.tools/`, so a changed recipe (or a
different standard library) rebuilds and an unchanged one is a no-op.

Run with the vLLM venv (the project venv need not carry peft):
`PYTHONPATH=. .tools/vllm/bin/python -m eval.tiny_model --out .tools/tiny-model`
"""
