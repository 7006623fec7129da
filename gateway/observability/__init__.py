"""What the gateway tells about itself: Prometheus metrics (`metrics`), goodput against SLO classes
(`goodput`), cost (`cost`), feedback (`feedback`), the request log and its redaction (`request_log`,
`redact`), traces (`tracing`; the OpenTelemetry side in `otel`, loaded only with traces on), and the
`Observer` that the relay calls when a request ends (`observer`).
"""
