#!/usr/bin/env bash
# `make run`: two simulated vLLM pools and the gateway on embedded-style defaults (no Redis needed).
# Auth stays on: a demo key is created through the admin API and printed. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PORT=${PORT:-8080}
mkdir -p .run
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

wait_for() {  # url, what[, tenths of a second]
  for _ in $(seq 1 "${3:-150}"); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$2 did not start; see .run/" >&2; exit 1
}

# The small pool also serves two LoRA adapters (config/example.yaml: alias `support`, or `small:legal`).
if [ -n "${VLLM:-}" ]; then  # make run VLLM=1: real vLLM (the tiny model) serves both pools (~1.3 GiB RSS each)
  mkdir -p .run/adapters
  ln -sfn "$PWD/.tools/tiny-model/lora-a" .run/adapters/support
  ln -sfn "$PWD/.tools/tiny-model/lora-b" .run/adapters/legal
  VLLM_NAMES="small large" VLLM_LORA_MODULES="support=$PWD/.run/adapters/support legal=$PWD/.run/adapters/legal" \
    scripts/vllm-serve 2 & pids+=($!)
  echo "starting two vLLM servers (30-100 s)..."
  wait_for http://127.0.0.1:8001/health "vLLM small" 3000
  wait_for http://127.0.0.1:8002/health "vLLM large" 3000
else
  "$BIN/python" -c 'import sys; from pathlib import Path; from eval.sim.adapters import write_adapter
for name in ("support", "legal"): write_adapter(Path(sys.argv[1]) / name)' .run/adapters
  "$BIN/llmgw" sim --host 127.0.0.1 --port 8001 --served-model-name small --profile small \
    --enable-lora --max-loras 2 --max-lora-rank 8 \
    --lora-modules "support=$PWD/.run/adapters/support" "legal=$PWD/.run/adapters/legal" >.run/sim-small.log 2>&1 & pids+=($!)
  "$BIN/llmgw" sim --host 127.0.0.1 --port 8002 --served-model-name large --profile large >.run/sim-large.log 2>&1 & pids+=($!)
  wait_for http://127.0.0.1:8001/health "simulator small"
  wait_for http://127.0.0.1:8002/health "simulator large"
fi

# A fresh admin key per run: it never leaves this machine, and the demo key is made with it.
export LLMGW_ADMIN_KEY="${LLMGW_ADMIN_KEY:-adm-$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))')}"
export LLMGW_URL="http://127.0.0.1:$PORT"
"$BIN/llmgw" serve --config config/example.yaml --port "$PORT" 2>&1 | tee .run/gateway.log & pids+=($!)
wait_for "http://127.0.0.1:$PORT/readyz" "the gateway"
KEY=$("$BIN/llmgw" keys create --org demo --app quickstart --tier standard | grep -o 'sk-[A-Za-z0-9_-]*' | head -n 1)

cat <<MSG

llm-gateway on http://127.0.0.1:$PORT  (pools: small -> :8001, large -> :8002${VLLM:+ (real vLLM, tiny model)}; logs in .run/)

  demo API key: $KEY
  admin key:    $LLMGW_ADMIN_KEY   (llmgw keys create|list|revoke, with LLMGW_ADMIN_KEY and LLMGW_URL set)

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H "authorization: Bearer $KEY" \\
    -H 'content-type: application/json' \\
    -d '{"model": "small", "messages": [{"role": "user", "content": "Hello!"}]}'

  OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=$KEY $BIN/python -c '
from openai import OpenAI
r = OpenAI().chat.completions.create(model="large", messages=[{"role": "user", "content": "Hi"}])
print(r.choices[0].message.content)'

  "model": "auto" lets the router pick small or large by difficulty (response header x-llmgw-tier).
  "model": "support" is the small pool's LoRA adapter support; "small:legal" its adapter legal.
  A request without a valid key gets 401. Metrics: curl -s http://127.0.0.1:$PORT/metrics | grep llmgw_
  Ctrl-C stops everything.

MSG
wait "${pids[-1]}"  # the gateway
