"""`/v1/embeddings`: deterministic unit vectors from a hash of each input.

Equal inputs give equal vectors in every process (BLAKE2b seeds a `random.Random`), unrelated inputs give
near-orthogonal ones. The OpenAI SDK asks for `encoding_format: "base64"` by default: little-endian
float32 bytes, base64-encoded, which `array('f')` produces without numpy.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import sys
import time
from array import array
from typing import Any

import orjson

from eval.sim.errors import bad_request
from eval.sim.requests import Context, check_model
from eval.sim.tokenizer import count_tokens


def embed(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    rng = random.Random(seed)
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _inputs(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(x, str) for x in raw):
            return list(raw)
        if all(isinstance(x, int) for x in raw):
            return [" ".join(map(str, raw))]
        if all(isinstance(x, list) for x in raw):
            return [" ".join(map(str, x)) for x in raw]
    raise bad_request("input must be a string, a list of strings or token ids", "input")


def embeddings_response(ctx: Context, body: dict[str, Any]) -> tuple[bytes, int]:
    """The response body and the number of prompt tokens."""
    model = check_model(ctx, body)
    texts = _inputs(body.get("input"))
    dim = body.get("dimensions") or ctx.profile.embedding_dim
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise bad_request("dimensions must be a positive integer", "dimensions")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad_request("encoding_format must be 'float' or 'base64'", "encoding_format")
    data: list[dict[str, Any]] = []
    tokens = 0
    for i, text in enumerate(texts):
        tokens += count_tokens(text)
        vec = embed(text, dim)
        value: Any = vec
        if fmt == "base64":
            arr = array("f", vec)
            if sys.byteorder != "little":
                arr.byteswap()
            value = base64.b64encode(arr.tobytes()).decode()
        data.append({"index": i, "object": "embedding", "embedding": value})
    body_out = {
        "id": ctx.next_id("embd"),
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }
    return orjson.dumps(body_out), tokens
