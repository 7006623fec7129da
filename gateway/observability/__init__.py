"""What the gateway tells about itself: Prometheus metrics (`metrics`), goodput against SLO classes
(`goodput`), cost (`cost`), feedback (`feedback`), the request log and its redaction (`request_log`,
`redact`), traces (`tracing`; the OpenTelemetry side in `otel`, loaded only with traces on), and the
`Observer` that the relay calls when a request ends (`observer`).
"""

from __future__ import annotations

from gateway.observability.observer import Observer

__all__ = ["Observer"]
