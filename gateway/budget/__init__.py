"""Token-budget admission: a request's reservation against its tenant's rules (ratelimit/), the
ticket it holds, top-ups of metered streams, settlement, and speculative admission (`admission`);
the per-pool calibrated input estimate (`estimate`); the checks on the usage a pool reports
(`usage`); refusals known from memory before a body is parsed (`early`); OpenAI's `x-ratelimit-*`
headers (`headers`).
"""
