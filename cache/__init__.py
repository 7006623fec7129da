"""Response caches (design §6): an exact cache keyed by the normalized request and the tenant scope,
and a semantic cache over a vector index. Never imports `gateway`; Redis and the encoder come in
through the small protocols in `cache.commands`.

Re-exported here: the protocols (`cache.commands`), the exact cache (`cache.key`, `cache.policy`,
`cache.exact`, `cache.entry`) and the semantic hit's verifier (`cache.verify`). The vector indexes
stay in `cache.semantic` (MemoryVectorIndex, RedisVectorIndex, VectorIndex, Vector), because
importing them here would load numpy and redis into every `import cache.…`.
"""

from __future__ import annotations

from cache.commands import Embedder
from cache.entry import assemble, replay, split_question, usage_of, with_question
from cache.exact import ExactStore, MemoryExactStore, RedisExactStore
from cache.key import exact_key, is_deterministic, semantic_scope
from cache.policy import HEADER_VALUES, uses_cache
from cache.verify import normal_form, same_question, why_different

__all__ = [
    "HEADER_VALUES",
    "Embedder",
    "ExactStore",
    "MemoryExactStore",
    "RedisExactStore",
    "assemble",
    "exact_key",
    "is_deterministic",
    "normal_form",
    "replay",
    "same_question",
    "semantic_scope",
    "split_question",
    "usage_of",
    "uses_cache",
    "why_different",
    "with_question",
]
