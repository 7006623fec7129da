"""How an upstream failure reaches the caller: which error (status, OpenAI type), which metric kind,
and whether another replica may be tried.

What a client is told about a pool is the pool's name, the status and a reason. When the pool refused
the caller's request (a 4xx), the reason is the pool's own message, which the caller needs to fix the
request ("not a multimodal model", "top_logprobs above 20"): cut to `REASON_MAX` characters, with
URLs, network addresses, host names with a domain, file paths and anything the request log would
redact as a secret replaced by placeholders (`pool_reason`). The whole text goes to the `llmgw.upstream`
log with the request id. A pool's 5xx text, and a connect error naming a host and port, never reach
the client. The structured bits OpenAI clients act on survive when they look like identifiers:
`param`, a string `code`, and a context-length refusal (as OpenAI's `context_length_exceeded`). A
pool's `Retry-After` is clamped to `RETRY_AFTER_MAX_S`.
"""

from __future__ import annotations

import logging
import re
import time
from email.utils import parsedate_to_datetime

import orjson
import re2

from gateway.edge.exchange import Kind
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    RateLimitError,
    RequestTooLargeError,
    SloUnattainableError,
    TransportError,
    UnprocessableEntityError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)
from gateway.observability.redact import SECRET_STEPS, scrub
from pools.pool import NoCapacity

PATHS = {
    Kind.CHAT: "/v1/chat/completions",
    Kind.COMPLETIONS: "/v1/completions",
    Kind.EMBEDDINGS: "/v1/embeddings",
}
# A replica that answers these before the first byte may be retried on another replica.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Failures after which the request may go to another replica.
RETRY_KINDS = frozenset({"connect", "disconnect", "client_error"})
# The longest Retry-After passed on from a pool (seconds): a pool's hour-long (or garbage) value must
# not park every client. A module default until the pool config grows a key for it.
RETRY_AFTER_MAX_S = 60
LOG_TEXT_MAX = 2000  # characters of a pool's error text kept in the log line
REASON_MAX = 300  # characters of a pool's refusal passed to the caller

log = logging.getLogger("llmgw.upstream")

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
_CONTEXT_LENGTH = re.compile(r"context.length|context window", re.IGNORECASE)
# What may name the inside of the cluster or a credential, in the order replaced: URLs (any scheme),
# IPv4 / IPv6 literals with an optional port, host names (a dotted name with a port, or with a label
# networks use anywhere after its first: `vllm-0.vllm.ns.svc.cluster.local`, `gpu-7.corp.example`; a
# field path such as `body.messages` or a version such as 0.32.0 stays), absolute file paths,
# credential-shaped tokens (a known key prefix, or 32+ characters of key alphabet with a digit), and
# control characters. The request log's secret patterns run first.
_SUFFIXES = (
    "local|internal|lan|svc|cluster|corp|intra|intranet|private|home|example|test|localdomain|com|net|org|"
    "io|ai|dev|cloud"
)
_INTERNAL = (
    (re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]{0,15}://\S*"), "<url>"),
    (  # IPv6: four groups or more, or a `::`
        re.compile(
            r"\[?(?:\b[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){3,7}\b"
            r"|(?:\b[0-9a-fA-F]{1,4})?(?::[0-9a-fA-F]{1,4})*::(?:[0-9a-fA-F]{1,4}\b(?::[0-9a-fA-F]{1,4}\b)*)?)"
            r"\]?(?::\d{1,5}\b)?"
        ),
        "<address>",
    ),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b"), "<address>"),
    (  # RE2: a run of dotted labels costs Python's engine quadratic time
        re2.compile(
            r"(?i)\b[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)*\.(?:" + _SUFFIXES + r")\b(?:\.[a-z0-9\-]+)*"
            r"(?::\d{1,5})?|\b[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)+:\d{1,5}\b"
        ),
        "<host>",
    ),
    (re.compile(r"\b[a-zA-Z][a-zA-Z0-9\-]*:\d{2,5}\b"), "<host>"),
    (re.compile(r"(?<![\w<])/(?:[\w.\-]+/)+[\w.\-]*"), "<path>"),
    (
        re2.compile(
            r"\b(?:(?:hf|sk|pk|rk|ghp|gho|ghs|glpat|xox[abpr]|pat|api|key|token|secret)[_\-][A-Za-z0-9_\-]{12,}"
            r"|[A-Za-z0-9+/_\-]*[0-9][A-Za-z0-9+/_\-]*[A-Za-z][A-Za-z0-9+/_\-]{30,}"
            r"|[A-Za-z0-9+/_\-]*[A-Za-z][A-Za-z0-9+/_\-]*[0-9][A-Za-z0-9+/_\-]{30,})"
        ),
        "[SECRET]",
    ),
    (re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+"), " "),
)

_PASS_THROUGH_4XX: dict[int, type[GatewayError]] = {
    400: InvalidRequestError,
    413: RequestTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def no_capacity(exc: NoCapacity) -> GatewayError:
    """A pool that could not place a request in time (or, by its SLO, would not): a retryable 503,
    never a 404."""
    error = SloUnattainableError if exc.reason == "slo_unattainable" else UpstreamUnavailableError
    return error(str(exc), headers={"retry-after": str(exc.retry_after)})


def clamp_retry_after(value: str | None, now: float | None = None) -> str | None:
    """A pool's Retry-After (delta-seconds or an HTTP date) as whole seconds in [0, RETRY_AFTER_MAX_S];
    None when it is absent or unreadable (the error's own default applies)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return str(min(int(value), RETRY_AFTER_MAX_S))
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    delta = when - (time.time() if now is None else now)
    return str(min(max(0, int(delta + 0.999)), RETRY_AFTER_MAX_S))


def _identifier(value: object) -> str | None:
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None


def _upstream_fields(body: bytes) -> tuple[str | None, str | None, str | None]:
    """(message, param, code) from an upstream body in any of the shapes pools use; param and code
    only when they look like identifiers (vLLM's integer code is dropped)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    err = data.get("error", data)
    if isinstance(err, str):  # vLLM's 401: {"error": "Unauthorized"}
        return err, None, None
    if not isinstance(err, dict):
        return None, None, None
    message = err.get("message")
    if not isinstance(message, str):
        message = data.get("detail") if isinstance(data.get("detail"), str) else None
    return message, _identifier(err.get("param")), _identifier(err.get("code"))


def pool_reason(message: str) -> str:
    """A pool's refusal, fit to show its caller: internal names replaced, at most REASON_MAX characters."""
    text = scrub(message[: 4 * REASON_MAX], SECRET_STEPS)
    for pattern, placeholder in _INTERNAL:
        text = pattern.sub(placeholder, text)
    text = " ".join(text.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3].rstrip() + "..."


def from_upstream(
    status: int, body: bytes, pool: str, retry_after: str | None = None, rid: str | None = None
) -> GatewayError:
    """The caller's error for a non-2xx pool response. The pool's text is logged whole; a refusal's
    (4xx) reason is relayed as `pool_reason` makes it."""
    message, param, code = _upstream_fields(body)
    text = message if message is not None else body[:LOG_TEXT_MAX].decode("utf-8", "replace")
    cls = _PASS_THROUGH_4XX.get(status)
    # The caller's own mistakes (and a busy pool) are routine: info; the rest is the pool's trouble.
    level = logging.INFO if cls is not None else logging.WARNING
    log.log(level, "pool %r answered HTTP %d (request %s): %s", pool, status, rid, text[:LOG_TEXT_MAX])
    wait = clamp_retry_after(retry_after)
    if cls is not None:
        # The caller's request was at fault (context too long, bad parameter): say so in their terms.
        reason = f"pool '{pool}' rejected the request (HTTP {status})"
        said = pool_reason(message) if message else ""
        if said:
            reason = f"{reason}: {said}"
        if status == 400 and message is not None and _CONTEXT_LENGTH.search(message):
            reason = f"the request exceeds the model's context length (pool '{pool}', HTTP 400): {said}"
            code = code or "context_length_exceeded"
        elif status == 429:
            reason = f"pool '{pool}' is rate limiting requests (HTTP 429)"
        err = cls(reason, param=param, code=code)
        if status == 429 and wait is not None:
            err.headers["retry-after"] = wait
        return err
    if status in (401, 403):
        # Our credentials for the pool are wrong: an operator problem, never the caller's key.
        return UpstreamError(f"pool '{pool}' rejected the gateway's credentials (HTTP {status})")
    if status == 404:
        return UpstreamError(f"pool '{pool}' does not serve the configured model (HTTP 404)")
    if status == 503:
        headers = {"retry-after": wait} if wait is not None else None
        return UpstreamUnavailableError(f"pool '{pool}' is unavailable (HTTP 503)", headers=headers)
    if status == 504:
        return UpstreamTimeoutError(f"pool '{pool}' timed out (HTTP 504)")
    if 400 <= status < 500:
        said = pool_reason(message) if message else ""
        reason = f"pool '{pool}' rejected the request (HTTP {status})"
        return InvalidRequestError(f"{reason}: {said}" if said else reason)
    return UpstreamError(f"pool '{pool}' failed with HTTP {status}")


def classify(exc: TransportError, pool: str, rid: str | None = None) -> tuple[GatewayError, str]:
    """(error for the caller, metric kind) for a failed exchange (a transport's error); its detail
    (addresses, OS errors) is logged with the request id, the caller is told the pool's name."""
    kind = exc.kind
    log.warning("pool %r: %s (request %s): %s: %s", pool, kind, rid, type(exc).__name__, exc.detail)
    if kind == "connect":
        return UpstreamUnavailableError(f"pool '{pool}' is unreachable"), kind
    if kind == "disconnect":
        return UpstreamError(f"pool '{pool}' closed the connection before the answer was complete"), kind
    if kind == "timeout":
        return UpstreamTimeoutError(f"pool '{pool}' did not answer in time"), kind
    return UpstreamError(f"pool '{pool}' sent {exc.reason}"), kind
