#!/usr/bin/env bash
# Goodput knee of the `make run` stack: two simulated pools (small :8001, large :8002, the ports of
# config/example.yaml) and the gateway on 127.0.0.1:$PORT, driven by eval/workloads/two-pools.yaml.
# Starts the stack itself (or, with SKIP_STACK=1, uses a running `make run` and $LLMGW_BENCH_KEY), makes
# a premium-tier key (600 req/min: the standard demo key's 120 req/min would be the knee), runs the sweep.
# Extra arguments go to `llmgw bench run` (e.g. --rates 1,2,4 --duration 10). Report: $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.venv/bin}
PORT=${PORT:-8080}
OUT=${OUT:-bench-results/two-pools}
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

wait_for() {  # url, what
  for _ in $(seq 1 150); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$2 did not start; see $OUT/" >&2; exit 1
}

if [ -z "${SKIP_STACK:-}" ]; then
  for port in 8001 8002 "$PORT"; do
    if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
      echo "port $port is in use (a running \`make run\`? then SKIP_STACK=1 LLMGW_BENCH_KEY=...)" >&2; exit 1
    fi
  done
  "$BIN/llmgw" sim --host 127.0.0.1 --port 8001 --served-model-name small --profile small >"$OUT/sim-small.log" 2>&1 & pids+=($!)
  "$BIN/llmgw" sim --host 127.0.0.1 --port 8002 --served-model-name large --profile large >"$OUT/sim-large.log" 2>&1 & pids+=($!)
  wait_for http://127.0.0.1:8001/health "simulator small"
  wait_for http://127.0.0.1:8002/health "simulator large"
  export LLMGW_ADMIN_KEY="adm-$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))')"
  export LLMGW_URL="http://127.0.0.1:$PORT"
  "$BIN/llmgw" serve --config config/example.yaml --port "$PORT" >"$OUT/gateway.log" 2>&1 & pids+=($!)
  wait_for "http://127.0.0.1:$PORT/readyz" "the gateway"
  LLMGW_BENCH_KEY=$("$BIN/llmgw" keys create --org bench --app knee --tier premium | head -n 1)
  export LLMGW_BENCH_KEY
fi
# --max-error-rate 1: the sweep goes past the knee on purpose; the errors there are what it measures.
"$BIN/llmgw" bench run eval/workloads/two-pools.yaml --url "http://127.0.0.1:$PORT" --out "$OUT" \
  --max-error-rate 1 "$@"
