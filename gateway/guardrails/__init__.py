"""Guardrails at the gateway (docs/design/025-guardrails.md): input detectors per alias or tenant tier
with a mode each (`detectors`, `injection`, `hidden`, `exfiltration`; secrets and personal data are
gateway/observability/redact.py's), the per-request plan (`plan`), the screen (`screen`), the relay
stage (`stage`), and output conformance to `response_format` JSON schemas (`conformance`)."""
