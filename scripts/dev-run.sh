#!/usr/bin/env bash
# `make run`: two simulated vLLM pools and the gateway on embedded-style defaults (no Redis needed).
# The simulators run in the background and stop when the gateway stops (Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PORT=${PORT:-8080}
mkdir -p .run
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN/llmgw" sim --port 8001 --served-model-name small --profile small >.run/sim-small.log 2>&1 & pids+=($!)
"$BIN/llmgw" sim --port 8002 --served-model-name large --profile large >.run/sim-large.log 2>&1 & pids+=($!)
for port in 8001 8002; do
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:$port/health" >/dev/null || { echo "simulator on :$port did not start; see .run/"; exit 1; }
done

cat <<MSG

llm-gateway on http://127.0.0.1:$PORT  (pools: small -> :8001, large -> :8002; logs in .run/)

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "small", "messages": [{"role": "user", "content": "Hello!"}]}'

  $BIN/python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="http://127.0.0.1:$PORT/v1", api_key="unused")
print(client.chat.completions.create(model="large", messages=[{"role": "user", "content": "Hi"}]).choices[0].message.content)
for chunk in client.chat.completions.create(model="small", messages=[{"role": "user", "content": "Hi"}], stream=True):
    print(chunk.choices[0].delta.content or "", end="", flush=True) if chunk.choices else None
PY

  metrics: curl -s http://127.0.0.1:$PORT/metrics | grep llmgw_     Ctrl-C stops everything.

MSG
"$BIN/llmgw" serve --config config/example.yaml --port "$PORT"
