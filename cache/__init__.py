"""Response caches (design §6): an exact cache keyed by the normalized request and the tenant scope,
and a semantic cache over a vector index. Never imports `gateway`; Redis and the encoder come in
through the small protocols in `cache.commands`."""
