"""Response caches (design §6): an exact cache keyed by the normalized request and the tenant scope,
and a semantic cache over a vector index. Never imports `gateway`; Redis and the encoder come in
through the small protocols in `cache.commands`.

Names are imported from their modules (no package facade, docs/design/018-layout.md): the protocols
(`cache.commands`), the exact cache (`cache.key`, `cache.policy`, `cache.exact`, `cache.entry`), the
semantic hit's verifier (`cache.verify`) and the vector indexes (`cache.semantic`: MemoryVectorIndex,
RedisVectorIndex, VectorIndex, Vector; it loads numpy and redis).
"""
