"""Process settings from the environment (one frozen class; `LLMGW_` prefix).

Policy lives in the YAML file (gateway.config); secrets and per-process knobs live here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMGW_", frozen=True, extra="ignore")

    config: str | None = Field(None, description="path of the policy YAML; unset = embedded default")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    workers: int = Field(1, ge=1)
    log_level: str = "info"
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="larger request bodies get 413")
    upstream_pool_size: int = Field(1024, ge=1, description="max pooled connections per process")
    upstream_client: Literal["h1", "aiohttp"] = Field(
        "h1",
        description="client for plain-HTTP replicas: h1 (the lean HTTP/1.1 client, gateway/upstream/h1.py) "
        "or aiohttp (TLS replicas always use aiohttp)",
    )
    gc_threshold: tuple[int, int, int] = Field(
        (20000, 10, 10), description="gc.set_threshold after start-up (see docs/design/003)"
    )
    # Redis: one connection factory for every user (gateway/redis_conn.py; docs/design/004, "Deployments").
    redis_mode: Literal["standalone", "sentinel", "cluster"] = Field(
        "standalone",
        description="how Redis runs: standalone (one primary at LLMGW_REDIS_URL), sentinel (the primary "
        "LLMGW_REDIS_SENTINELS name for LLMGW_REDIS_SENTINEL_MASTER, followed across failovers) or cluster "
        "(a Redis Cluster found from the seed nodes in LLMGW_REDIS_URL)",
    )
    redis_url: str | None = Field(
        None,
        description="Redis for the limiter, key store, cache and shared learning. standalone: "
        "redis://[user:password@]host:port/db (rediss:// for TLS); cluster: one or more seed nodes, "
        "comma-separated URLs or host:port (database 0 only); sentinel: not used (the sentinels name the "
        "primary), refused when set",
    )
    redis_sentinels: str | None = Field(
        None, description="sentinel mode: the sentinels, host:port,host:port (port 26379 when left out)"
    )
    redis_sentinel_master: str | None = Field(
        None, description="sentinel mode: the name the sentinels monitor the primary under"
    )
    redis_sentinel_username: str | None = Field(
        None, description="sentinel mode: ACL user of the sentinels themselves (unset: none)"
    )
    redis_sentinel_password: SecretStr | None = Field(
        None, description="sentinel mode: password of the sentinels themselves (unset: none)"
    )
    redis_sentinel_password_file: str | None = Field(
        None,
        description="sentinel mode: a file holding the sentinels' password (a mounted Secret; one "
        "trailing newline ignored); not together with LLMGW_REDIS_SENTINEL_PASSWORD",
    )
    redis_username: str | None = Field(
        None, description="ACL user of the Redis servers; overrides the user in LLMGW_REDIS_URL"
    )
    redis_password: SecretStr | None = Field(
        None, description="password of the Redis servers; overrides the one in LLMGW_REDIS_URL"
    )
    redis_password_file: str | None = Field(
        None,
        description="a file holding the Redis password (a mounted Secret; one trailing newline ignored); "
        "not together with LLMGW_REDIS_PASSWORD",
    )
    redis_tls: bool = Field(
        False,
        description="TLS towards Redis (on as well when LLMGW_REDIS_URL is rediss://); in sentinel mode the "
        "sentinels are reached with the same TLS settings",
    )
    redis_tls_ca_file: str | None = Field(
        None, description="PEM bundle of the CAs that sign the servers' certificates (unset: the system's)"
    )
    redis_tls_cert_file: str | None = Field(
        None, description="PEM client certificate, for servers requiring one (with LLMGW_REDIS_TLS_KEY_FILE)"
    )
    redis_tls_key_file: str | None = Field(None, description="PEM private key of LLMGW_REDIS_TLS_CERT_FILE")
    redis_tls_verify: Literal["full", "ca", "none"] = Field(
        "full",
        description="full: the certificate must chain to a trusted CA and name the host (or "
        "LLMGW_REDIS_TLS_SERVER_NAME); ca: the chain only; none: no verification (encryption only)",
    )
    redis_tls_server_name: str | None = Field(
        None,
        description="the name sent as SNI and checked in the certificate when it differs from the host "
        "connected to (standalone and sentinel modes)",
    )
    redis_limiter_client: Literal["auto", "redis-py", "resp"] = Field(
        "auto",
        description="the limiter's client: resp (the hand-written pipelined client, ratelimit/resp.py; "
        "standalone only), redis-py (every mode), auto = resp for standalone (redis-py measured +12 % "
        "latency per request there, docs/design/004), redis-py for sentinel and cluster",
    )
    redis_timeout_s: float = Field(0.25, gt=0, description="connect / operation timeout towards Redis")
    admin_key: str | None = Field(None, description="bearer key of the admin API; unset = admin API disabled")
    signing_key: str | None = Field(
        None,
        min_length=16,
        description="signs the opaque values clients send back (thinking signatures, encrypted reasoning); "
        "every replica needs the same one; unset = a random key per process (values verify only there)",
    )
    feedback_ttl_s: float = Field(
        3600.0, gt=0, description="how long an answer can be rated through POST /v1/feedback"
    )
    feedback_max_entries: int = Field(
        50_000, ge=1, description="answers remembered for feedback (per process, a ring of 16 B entries)"
    )
    request_log: bool = Field(False, description="one JSON line per request on stdout (llmgw.requests)")
    request_log_text: bool = Field(
        False, description="add prompt and response text to the request log, PII and secrets redacted"
    )
    tracing: bool = Field(
        False, description="OpenTelemetry traces over OTLP/HTTP (endpoint from OTEL_EXPORTER_OTLP_*)"
    )
    trace_sample_ratio: float = Field(
        1.0, ge=0, le=1, description="share of new traces sampled (a sampled caller's trace is kept)"
    )
    # The edge's limits on what a client controls before the app runs (gateway/edge/protocol.py).
    max_header_bytes: int = Field(
        32 * 1024, ge=1024, description="request line + headers larger than this get 431"
    )
    max_headers: int = Field(100, ge=8, description="requests with more header lines get 431")
    header_timeout_s: float = Field(
        10.0, gt=0, description="request line and headers must arrive within this (else 408)"
    )
    body_timeout_s: float = Field(60.0, gt=0, description="a request body must arrive within this (else 408)")
    body_min_rate: int = Field(
        1024, ge=0, description="bytes/s a request body must average once body_grace_s passed (else 408)"
    )
    body_grace_s: float = Field(
        5.0, gt=0, description="how long a request body may take before body_min_rate applies"
    )
    write_stall_s: float = Field(
        30.0,
        gt=0,
        description="a client that reads nothing of its response this long is dropped (the pool call is "
        "cancelled and the reservation settled)",
    )
    max_connections: int = Field(
        4096, ge=1, description="open client connections per process; more are answered 503 at once"
    )
    send_buffer_bytes: int = Field(
        128 * 1024,
        ge=4096,
        description="socket send buffer per client connection: bounds how much of a response a client "
        "that stopped reading can leave in flight before write_stall_s starts counting",
    )
    keepalive_timeout_s: float = Field(5.0, gt=0, description="idle keep-alive connections close after this")
    max_json_depth: int = Field(
        64, ge=4, le=200, description="request bodies nested deeper (objects/arrays) get 400"
    )
    drain_seconds: float = Field(30.0, ge=0, description="graceful shutdown window on SIGTERM")
    drain_delay_s: float = Field(
        3.0,
        ge=0,
        description="after SIGTERM, keep serving (readiness false) this long so load balancers stop "
        "sending new requests before the listener closes",
    )
