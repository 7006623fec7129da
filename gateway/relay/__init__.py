"""The request hot path: one request record (`gateway.record`) through named stages (see `pipeline`'s
docstring and docs/architecture.md). Public: `pipeline` (`Relay` and what it is built from), `normalize`
(the body for the pool) and `response_cache` (the response cache as the relay uses it); the stage
modules (`_body`, `_cached`, `_admit`, `_unary`, `_answer`, `_stream`, `_conform`, `_failure`) are
internal. Names are imported from their modules (no package facade, docs/design/018-layout.md).
"""
