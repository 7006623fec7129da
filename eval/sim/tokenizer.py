"""A tiny deterministic, lossless tokenizer.

Real tokenizers are model-specific and heavy; the simulator only needs token *counts* that grow with
text length like a BPE's, and stable token pieces so equal prefixes give equal blocks for the prefix
cache. A piece is optional leading whitespace followed by either up to 4 word characters (long words
are split every 4 characters, like BPE's ~4 chars/token on English) or one punctuation character;
whitespace runs that are not followed by a word/punctuation form their own piece. Joining the pieces
gives back the exact text, which streaming and replay rely on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PIECE = re.compile(r"\s*\w{1,4}|\s*[^\w\s]|\s+")


def tokenize(text: str) -> list[str]:
    """Split `text` into pieces whose concatenation is exactly `text`."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text))


def block_hashes(
    pieces: Sequence[str], block_size: int, max_blocks: int | None = None, salt: int = 0
) -> list[int]:
    """Chain hashes of the full blocks of `pieces` (vLLM's prefix-cache key scheme).

    Each block's hash covers its own pieces and its parent's hash, so a block matches only when the whole
    prefix before it matches. Python's `hash` is per-process salted, which is fine: the cache lives in
    one process. `salt` starts the chain: vLLM keys the blocks of a LoRA request by its adapter too, so
    an adapter's prompt never hits the base model's (or another adapter's) cached blocks.
    """
    n_full = len(pieces) // block_size
    if max_blocks is not None:
        n_full = min(n_full, max_blocks)
    out: list[int] = []
    parent = salt
    for i in range(n_full):
        parent = hash((parent, tuple(pieces[i * block_size : (i + 1) * block_size])))
        out.append(parent)
    return out
