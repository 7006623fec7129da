#!/usr/bin/env bash
# `make run`: two pools (simulated, or real vLLM with VLLM=1) and the gateway, with auth on: a demo key
# is created through the admin API and printed. Ctrl-C or SIGTERM stops every process it started.
#   PORT=8080             the gateway's port
#   SIM_PORTS="8001 8002" the small and the large pool's ports (comma or space separated; with VLLM=1 the
#                         large one must be the small one + 1, as scripts/vllm-serve numbers its servers)
# Each stack keeps its files in .run/<sim|vllm>/<PORT>/ (the policy made from config/example.yaml with
# these ports, the adapters, logs appended per start, pids): a VLLM=1 run never reads what a simulator
# run left behind, and a second start never touches a running stack's files.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PORT=${PORT:-8080}
SIM_PORTS=${SIM_PORTS:-8001 8002}
mode=sim
[ -n "${VLLM:-}" ] && mode=vllm

die() { echo "make run: $*" >&2; exit 1; }

read -r -a sim_ports <<< "${SIM_PORTS//,/ }"
[ "${#sim_ports[@]}" -eq 2 ] || die "SIM_PORTS takes two ports, the small pool's and the large one's (got '$SIM_PORTS')"
SMALL=${sim_ports[0]}
LARGE=${sim_ports[1]}
for p in "$PORT" "$SMALL" "$LARGE"; do
  [[ $p =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 65535 ] || die "'$p' is not a TCP port"
done
[ "$PORT" != "$SMALL" ] && [ "$PORT" != "$LARGE" ] && [ "$SMALL" != "$LARGE" ] ||
  die "PORT=$PORT and SIM_PORTS='$SIM_PORTS' must be three different ports"
if [ "$mode" = vllm ] && [ "$LARGE" -ne $((SMALL + 1)) ]; then
  die "with VLLM=1 the large pool's port is the small one's + 1 (SIM_PORTS=$SMALL,$((SMALL + 1)))"
fi

state=.run/$mode/$PORT
mkdir -p "$state"

# Which running `make run` holds a port: the stack directories record their ports and their pid.
owner_of() {  # port -> "pid N, files in DIR/" or nothing
  local f pid
  for f in .run/*/*/ports; do
    [ -f "$f" ] || continue
    pid=$(cat "${f%/ports}/make-run.pid" 2>/dev/null) || continue
    [ "$pid" != $$ ] || continue  # this run's directory still says the last run's ports
    if kill -0 "$pid" 2>/dev/null && grep -qw -- "$1" "$f"; then
      echo "pid $pid, files in ${f%/ports}/"
      return
    fi
  done
}

pids=()
started() {  # pid, name
  pids+=("$1")
  echo "$1 $2" >>"$state/pids"
}

cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  # vLLM takes a few seconds to stop; whatever is still there after 30 s is killed.
  for _ in $(seq 1 300); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f "$state/make-run.pid"
}

# One stack per directory: the lock is held for this script's life (flock is released when it exits,
# however it exits). A second start with the same PORT stops here, before it writes anything.
exec 9>>"$state/lock"
if ! flock -n 9; then
  pid=$(cat "$state/make-run.pid" 2>/dev/null || echo "?")
  die "another \`make run\` (pid $pid) is already serving on port $PORT from $state/; stop it first (Ctrl-C in its terminal, or kill $pid), or choose another PORT"
fi
echo $$ >"$state/make-run.pid"
trap cleanup EXIT
trap 'exit 130' INT  # the EXIT trap then stops everything, once
trap 'exit 143' TERM

# Every port free before anything starts. SO_REUSEADDR as uvicorn binds: a port in TIME_WAIT after
# the last run stopped is free to it, so it must not count as taken here.
taken=$("$BIN/python" - "$PORT" "$SMALL" "$LARGE" <<'PY'
import socket, sys
for port in sys.argv[1:]:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError:
            print(port)
PY
)
if [ -n "$taken" ]; then
  for p in $taken; do
    who=$(owner_of "$p")
    if [ -n "$who" ]; then
      echo "make run: port $p is in use by another \`make run\` ($who)" >&2
    else
      echo "make run: port $p is in use by another program (ss -ltnp 'sport = :$p' shows which)" >&2
    fi
  done
  die "nothing was started; stop that or choose free ports, e.g. make run PORT=18080 SIM_PORTS=18001,18002"
fi
echo "$PORT $SMALL $LARGE" >"$state/ports"
: >"$state/pids"  # "pid name" of every process started below, for cleanup and for anyone checking

# Logs are appended, with a line per start: the previous run's lines stay for a post-mortem.
log() {  # name -> path, after writing the start line
  echo "=== make run (pid $$) started $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$state/$1.log"
  echo "$state/$1.log"
}

wait_for() {  # url, what, log[, tenths of a second]
  for _ in $(seq 1 "${4:-150}"); do
    curl -fs "$1" >/dev/null 2>&1 && return 0
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null || die "$2 exited while starting; see $3"
    done
    sleep 0.1
  done
  die "$2 did not start; see $3"
}

# The policy: config/example.yaml with this stack's ports and adapter directory.
sed -e "s#http://127.0.0.1:8001#http://127.0.0.1:$SMALL#" -e "s#http://127.0.0.1:8002#http://127.0.0.1:$LARGE#" \
  -e "s#source: \.run/adapters/#source: $PWD/$state/adapters/#" config/example.yaml >"$state/policy.yaml"
grep -q "127.0.0.1:$SMALL\"" "$state/policy.yaml" && grep -q "127.0.0.1:$LARGE\"" "$state/policy.yaml" ||
  die "config/example.yaml no longer names its pools http://127.0.0.1:8001 and :8002; update scripts/dev-run.sh"

# The small pool also serves two LoRA adapters (config/example.yaml: alias `support`, or `small:legal`).
# Rebuilt per start: this stack's directory, so a simulator's adapter directories and vLLM's links
# to the tiny model's adapters never meet (`ln -sfn` onto a directory links inside it).
rm -rf "$state/adapters" && mkdir -p "$state/adapters"
adapters="support=$PWD/$state/adapters/support legal=$PWD/$state/adapters/legal"
if [ "$mode" = vllm ]; then  # real vLLM (the tiny model) serves both pools (~1.3 GiB RSS each)
  ln -s "$PWD/.tools/tiny-model/lora-a" "$state/adapters/support"
  ln -s "$PWD/.tools/tiny-model/lora-b" "$state/adapters/legal"
  vlog=$(log vllm)
  VLLM_PORT=$SMALL VLLM_NAMES="small large" VLLM_LORA_MODULES="$adapters" \
    scripts/vllm-serve 2 9>&- >>"$vlog" 2>&1 &
  started $! vllm-serve
  echo "starting two vLLM servers on :$SMALL and :$LARGE (30-100 s; logs .run/vllm-$SMALL.log, .run/vllm-$LARGE.log)..."
  wait_for "http://127.0.0.1:$SMALL/health" "vLLM small" ".run/vllm-$SMALL.log" 3000
  wait_for "http://127.0.0.1:$LARGE/health" "vLLM large" ".run/vllm-$LARGE.log" 3000
else
  "$BIN/python" -c 'import sys; from pathlib import Path; from eval.sim.adapters import write_adapter
for name in ("support", "legal"): write_adapter(Path(sys.argv[1]) / name)' "$state/adapters"
  small_log=$(log sim-small)
  large_log=$(log sim-large)
  read -r -a modules <<< "$adapters"
  "$BIN/llmgw" sim --host 127.0.0.1 --port "$SMALL" --served-model-name small --profile small \
    --enable-lora --max-loras 2 --max-lora-rank 8 --lora-modules "${modules[@]}" 9>&- >>"$small_log" 2>&1 &
  started $! sim-small
  "$BIN/llmgw" sim --host 127.0.0.1 --port "$LARGE" --served-model-name large --profile large \
    9>&- >>"$large_log" 2>&1 &
  started $! sim-large
  wait_for "http://127.0.0.1:$SMALL/health" "simulator small" "$small_log"
  wait_for "http://127.0.0.1:$LARGE/health" "simulator large" "$large_log"
fi

# A fresh admin key per run: it never leaves this machine, and the demo key is made with it.
export LLMGW_ADMIN_KEY="${LLMGW_ADMIN_KEY:-adm-$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))')}"
export LLMGW_URL="http://127.0.0.1:$PORT"
gw_log=$(log gateway)
from=$(($(stat -c %s "$gw_log") + 1))
# A dev stack has no load balancer to drain from: stop at once on SIGTERM, in-flight requests get 5 s.
LLMGW_DRAIN_DELAY_S=0 LLMGW_DRAIN_SECONDS=5 \
  "$BIN/llmgw" serve --config "$state/policy.yaml" --port "$PORT" 9>&- >>"$gw_log" 2>&1 &
gateway=$!
started "$gateway" gateway
# The gateway's own lines on this terminal too, as before; its pid stays the gateway's (no pipe).
tail -c "+$from" -f --pid="$gateway" "$gw_log" 9>&- &
started $! tail
wait_for "http://127.0.0.1:$PORT/readyz" "the gateway" "$gw_log"
KEY=$("$BIN/llmgw" keys create --org demo --app quickstart --tier standard | grep -o 'sk-[A-Za-z0-9_-]*' | head -n 1)

cat <<MSG

llm-gateway on http://127.0.0.1:$PORT  (pools: small -> :$SMALL, large -> :$LARGE${VLLM:+ (real vLLM, tiny model)}; policy, logs and pids in $state/)

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
# Serve until one of the processes ends (or a signal ends this script): then stop the rest.
services=("${pids[@]}")
unset 'services[-1]'  # not tail: it ends with the gateway
rc=0
wait -n "${services[@]}" || rc=$?
while read -r pid name; do
  if [ "$name" != tail ] && ! kill -0 "$pid" 2>/dev/null; then
    echo "make run: $name (pid $pid) exited (status $rc); stopping the rest (logs in $state/)" >&2
  fi
done <"$state/pids"
exit "$rc"
