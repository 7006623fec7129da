"""Routing: the difficulty model (MiniLM embedding + trained head), the routing policy, the cascade.

Nothing here imports `gateway`, FastAPI or `eval` (design §2). The difficulty model's serving path needs
only numpy, onnxruntime and tokenizers; the encoder it runs is exported at build time
(`make router-encoder`, eval/routing/export_encoder.py).
"""
