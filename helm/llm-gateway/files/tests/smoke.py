"""`helm test` smoke check: one chat completion through the gateway (Python stdlib only).

Runs in the gateway image. Env: GATEWAY_URL, MODEL, API_KEY (optional), DEADLINE_S. A pool that is
scaling from zero answers a retryable 503 (with Retry-After) after the gateway's cold-start hold, so
503/429 are retried until the deadline; anything else fails at once with the gateway's error body.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request


def complete(url: str, model: str, key: str | None, timeout: float) -> dict[str, object]:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reply: dict[str, object] = json.load(resp)
        return reply


def check(reply: dict[str, object]) -> str:
    choices = reply.get("choices")
    usage = reply.get("usage")
    if not isinstance(choices, list) or not choices or not isinstance(usage, dict):
        raise ValueError(f"not a chat completion: {reply}")
    content = choices[0].get("message", {}).get("content")
    if not content or not usage.get("completion_tokens"):
        raise ValueError(f"empty completion: {reply}")
    return str(content)


def main() -> int:
    url = os.environ["GATEWAY_URL"].rstrip("/")
    model = os.environ["MODEL"]
    key = os.environ.get("API_KEY") or None
    deadline = time.monotonic() + float(os.environ.get("DEADLINE_S", "900"))
    while True:
        try:
            content = check(complete(url, model, key, timeout=300))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            if exc.code in (429, 503) and time.monotonic() < deadline:
                wait = float(exc.headers.get("retry-after") or 5)
                print(f"{exc.code} (retrying in {wait:.0f}s): {detail}", flush=True)
                time.sleep(min(wait, 30))
                continue
            print(f"FAIL: HTTP {exc.code}: {detail}", file=sys.stderr)
            return 1
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and time.monotonic() < deadline:
                print(f"gateway not reachable yet ({exc}), retrying", flush=True)
                time.sleep(5)
                continue
            print(f"FAIL: {exc}", file=sys.stderr)
            return 1
        print(f"OK: {model} answered: {content!r}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
