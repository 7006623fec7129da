#!/bin/sh
# The chart's in-chart Redis (redis.mode internal, and sentinel without external sentinels): writes the
# server's configuration from the environment the StatefulSets set, then execs redis-server; also the
# probes and the data nodes' preStop hook. POSIX sh (busybox ash in the image; dash in the chart tests).
#
#   redis.sh node            a data node: standalone, or (REDIS_MASTER_NAME set) a primary or replica
#   redis.sh sentinel        a sentinel monitoring REDIS_MASTER_NAME
#   redis.sh ping-node       probe: the local data node answers PONG (a replica: and is in sync)
#   redis.sh ping-sentinel   probe: the local sentinel answers PONG
#   redis.sh prestop         preStop of a data node: a primary hands over to a replica in sync
#                            (SENTINEL FAILOVER)
#
# The password is read from REDIS_PASSWORD_FILE (trailing newlines dropped) and written only into the
# configuration file under REDIS_CONF_DIR (an in-memory emptyDir), never onto a command line. Hosts
# are `host:port` (REDIS_NODES, REDIS_SENTINELS, REDIS_INITIAL_PRIMARY); every process announces
# REDIS_ANNOUNCE_HOST, its stable DNS name, so sentinels and clients see hostnames, not pod IPs.
set -eu

: "${REDIS_PORT:=6379}"
: "${SENTINEL_PORT:=26379}"
: "${REDIS_CONF_DIR:=/conf}"
: "${REDIS_DATA_DIR:=/data}"
: "${REDIS_MAXMEMORY:=256mb}"
: "${REDIS_MASTER_NAME:=}"
: "${REDIS_ANNOUNCE_HOST:=}"
: "${REDIS_INITIAL_PRIMARY:=}"
: "${REDIS_NODES:=}"
: "${REDIS_SENTINELS:=}"
: "${REDIS_QUORUM:=2}"
: "${REDIS_DOWN_AFTER_MS:=5000}"
: "${REDIS_FAILOVER_TIMEOUT_MS:=60000}"
: "${REDIS_USERNAME:=}"
: "${REDIS_PASSWORD_FILE:=}"
: "${REDIS_TLS:=no}"
: "${REDIS_TLS_CERT_FILE:=/tls/tls.crt}"
: "${REDIS_TLS_KEY_FILE:=/tls/tls.key}"
: "${REDIS_TLS_CA_FILE:=/tls/ca.crt}"
: "${REDIS_TLS_AUTH_CLIENTS:=no}"
: "${REDIS_CLI_TIMEOUT_S:=3}"
: "${REDIS_PRESTOP_WAIT_S:=20}"

# printf, not echo: dash's echo would unescape the backslashes quote() adds.
line() { printf '%s\n' "$*"; }
log() { printf 'redis.sh: %s\n' "$*" >&2; }

password() { cat "$REDIS_PASSWORD_FILE"; }

# A Redis configuration string: double-quoted, backslashes and double quotes escaped.
quote() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')"; }

# cli auth|noauth HOST:PORT ARGS...: one redis-cli call (TLS flags when REDIS_TLS=yes; `auth` sends the
# ACL user and password: the data nodes need them, the sentinels have none).
cli() {
  _auth=$1 _host=${2%:*} _port=${2##*:}
  shift 2
  if [ "$REDIS_TLS" = yes ]; then
    set -- --tls --cacert "$REDIS_TLS_CA_FILE" --cert "$REDIS_TLS_CERT_FILE" --key "$REDIS_TLS_KEY_FILE" "$@"
  fi
  if [ "$_auth" = auth ] && [ -n "$REDIS_PASSWORD_FILE" ]; then
    if [ -n "$REDIS_USERNAME" ]; then
      set -- --user "$REDIS_USERNAME" "$@"
    fi
    REDISCLI_AUTH=$(password) timeout "$REDIS_CLI_TIMEOUT_S" redis-cli --raw -h "$_host" -p "$_port" "$@"
  else
    timeout "$REDIS_CLI_TIMEOUT_S" redis-cli --raw -h "$_host" -p "$_port" "$@"
  fi
}

# The current primary as host:port: what a sentinel says (skipping SKIP, a sentinel's own address),
# else a data node (not this one) whose ROLE is master. Nothing on a fresh install.
discover_primary() {
  _skip=${1:-}
  for _s in $REDIS_SENTINELS; do
    [ "$_s" = "$_skip" ] && continue
    _out=$(cli noauth "$_s" sentinel get-master-addr-by-name "$REDIS_MASTER_NAME" 2>/dev/null) || continue
    _h=$(printf '%s\n' "$_out" | sed -n 1p)
    _p=$(printf '%s\n' "$_out" | sed -n 2p)
    if [ -n "$_h" ] && [ -n "$_p" ]; then
      log "sentinel $_s names $_h:$_p the primary of $REDIS_MASTER_NAME"
      line "$_h:$_p"
      return 0
    fi
  done
  for _n in $REDIS_NODES; do
    [ "$_n" = "$REDIS_ANNOUNCE_HOST:$REDIS_PORT" ] && continue
    _role=$(cli auth "$_n" role 2>/dev/null | sed -n 1p) || continue
    if [ "$_role" = master ]; then
      log "no sentinel answered; $_n says it is a primary"
      line "$_n"
      return 0
    fi
  done
  return 1
}

# Listener and TLS lines shared by data nodes and sentinels (PORT).
listener_conf() {
  line "protected-mode no"
  if [ "$REDIS_TLS" = yes ]; then
    line "port 0"
    line "tls-port $1"
    line "tls-cert-file $(quote "$REDIS_TLS_CERT_FILE")"
    line "tls-key-file $(quote "$REDIS_TLS_KEY_FILE")"
    line "tls-ca-cert-file $(quote "$REDIS_TLS_CA_FILE")"
    line "tls-auth-clients $REDIS_TLS_AUTH_CLIENTS"
    line "tls-replication yes"
  else
    line "port $1"
  fi
}

node_conf() {
  listener_conf "$REDIS_PORT"
  line "dir $(quote "$REDIS_DATA_DIR")"
  line "maxmemory $REDIS_MAXMEMORY"
  # Refuse writes when full rather than evicting budget or key records silently.
  line "maxmemory-policy noeviction"
  # Append-only file fsynced every second; no RDB snapshots besides.
  line "appendonly yes"
  line "appendfsync everysec"
  line 'save ""'
  if [ -n "$REDIS_PASSWORD_FILE" ]; then
    _pw=$(password)
    line "requirepass $(quote "$_pw")"
    line "masterauth $(quote "$_pw")"
    if [ -n "$REDIS_USERNAME" ] && [ "$REDIS_USERNAME" != default ]; then
      line "user $REDIS_USERNAME on $(quote ">$_pw") ~* &* +@all"
      line "masteruser $REDIS_USERNAME"
    fi
  fi
  if [ -n "$REDIS_MASTER_NAME" ]; then
    line "replica-announce-ip $REDIS_ANNOUNCE_HOST"
    line "replica-announce-port $REDIS_PORT"
    if _primary=$(discover_primary); then :; else
      _primary=$REDIS_INITIAL_PRIMARY
      log "no sentinel or node names a primary: $_primary, the initial one, is"
    fi
    if [ "$_primary" = "$REDIS_ANNOUNCE_HOST:$REDIS_PORT" ]; then
      log "starting as the primary"
    else
      log "starting as a replica of $_primary"
      line "replicaof ${_primary%:*} ${_primary##*:}"
    fi
  fi
}

sentinel_conf() {
  listener_conf "$SENTINEL_PORT"
  line "dir $(quote "$REDIS_CONF_DIR")"
  # Hostnames, not IPs: a rescheduled pod keeps its name but not its address. resolve-hostnames must
  # come before `sentinel monitor` names a host.
  line "sentinel resolve-hostnames yes"
  line "sentinel announce-hostnames yes"
  line "sentinel announce-ip $REDIS_ANNOUNCE_HOST"
  line "sentinel announce-port $SENTINEL_PORT"
  if _primary=$(discover_primary "$REDIS_ANNOUNCE_HOST:$SENTINEL_PORT"); then :; else
    _primary=$REDIS_INITIAL_PRIMARY
    log "no primary found: monitoring the initial primary $_primary"
  fi
  line "sentinel monitor $REDIS_MASTER_NAME ${_primary%:*} ${_primary##*:} $REDIS_QUORUM"
  line "sentinel down-after-milliseconds $REDIS_MASTER_NAME $REDIS_DOWN_AFTER_MS"
  line "sentinel failover-timeout $REDIS_MASTER_NAME $REDIS_FAILOVER_TIMEOUT_MS"
  line "sentinel parallel-syncs $REDIS_MASTER_NAME 1"
  if [ -n "$REDIS_PASSWORD_FILE" ]; then
    if [ -n "$REDIS_USERNAME" ] && [ "$REDIS_USERNAME" != default ]; then
      line "sentinel auth-user $REDIS_MASTER_NAME $REDIS_USERNAME"
    fi
    line "sentinel auth-pass $REDIS_MASTER_NAME $(quote "$(password)")"
  fi
}

write_conf() {  # write_conf FILE GENERATOR: the generator's output, readable by this user only
  umask 077
  "$2" >"$1.tmp"
  mv "$1.tmp" "$1"
}

# A primary with a replica in sync asks a sentinel to fail over, then waits (at most
# REDIS_PRESTOP_WAIT_S) until the sentinels name another primary: clients follow before this one stops.
# Anything else: no-op.
prestop() {
  [ -n "$REDIS_MASTER_NAME" ] || return 0
  _self=$REDIS_ANNOUNCE_HOST:$REDIS_PORT
  _info=$(cli auth "127.0.0.1:$REDIS_PORT" info replication 2>/dev/null) || return 0
  case "$_info" in *role:master*) ;; *) return 0 ;; esac
  # Only to a replica that is in sync: promoting one still in its first sync would lose the data.
  case "$_info" in
    *state=online*) ;;
    *)
      log "no replica in sync: stopping without a hand-over"
      return 0
      ;;
  esac
  for _s in $REDIS_SENTINELS; do
    [ "$(cli noauth "$_s" sentinel failover "$REDIS_MASTER_NAME" 2>/dev/null)" = OK ] || continue
    log "sentinel $_s fails $REDIS_MASTER_NAME over from $_self"
    _i=0
    while [ "$_i" -lt "$REDIS_PRESTOP_WAIT_S" ]; do
      sleep 1
      _i=$((_i + 1))
      _out=$(cli noauth "$_s" sentinel get-master-addr-by-name "$REDIS_MASTER_NAME" 2>/dev/null) || continue
      _now=$(printf '%s\n' "$_out" | sed -n 1p):$(printf '%s\n' "$_out" | sed -n 2p)
      if [ "$_now" != ":" ] && [ "$_now" != "$_self" ]; then
        log "$_now is the primary now"
        return 0
      fi
    done
    log "no new primary after ${REDIS_PRESTOP_WAIT_S}s"
    return 0
  done
  log "no sentinel accepted a failover"
}

case "${1:-}" in
  node)
    write_conf "$REDIS_CONF_DIR/redis.conf" node_conf
    exec redis-server "$REDIS_CONF_DIR/redis.conf"
    ;;
  sentinel)
    write_conf "$REDIS_CONF_DIR/sentinel.conf" sentinel_conf
    exec redis-server "$REDIS_CONF_DIR/sentinel.conf" --sentinel
    ;;
  ping-node)
    [ "$(cli auth "127.0.0.1:$REDIS_PORT" ping)" = PONG ]
    # A replica is ready once it holds the primary's data: a rolling update then never stops the
    # primary (and hands over) while its replicas are still syncing.
    if [ -n "$REDIS_MASTER_NAME" ]; then
      _info=$(cli auth "127.0.0.1:$REDIS_PORT" info replication)
      case "$_info" in
        *role:slave*)
          case "$_info" in *master_link_status:up*) ;; *) exit 1 ;; esac
          ;;
      esac
    fi
    ;;
  ping-sentinel)
    [ "$(cli noauth "127.0.0.1:$SENTINEL_PORT" ping)" = PONG ]
    ;;
  prestop)
    prestop
    ;;
  *)
    line "usage: redis.sh node|sentinel|ping-node|ping-sentinel|prestop" >&2
    exit 2
    ;;
esac
