"""Replica pools: discovery, a live load snapshot per replica, replica picking, resilience.

`pools` never imports `gateway` (design §2): the gateway builds a `ReplicaPool` from its policy and
drives it from the relay. Decisions (`picker.pick`, `breaker`, `budget`) are pure functions or
small state machines over plain data with an explicit clock; I/O (scraping, discovery) sits behind
small protocols and runs in background tasks.
"""
