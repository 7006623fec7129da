"""Redis as production runs it, started by the tests: a Redis Cluster, a Sentinel group, a TLS server.

    with RedisCluster(tmp / "cluster", primaries=3, replicas_per_primary=1) as cluster:
        cluster.url, cluster.seeds                   # redis://127.0.0.1:p1, ["127.0.0.1:p1", ...]
        old = cluster.kill_primary_of("{llmgw}")      # kill -9 the primary serving that key's slot
        cluster.wait_failover("{llmgw}", old)         # a replica took the slot over, cluster_state:ok

    with SentinelGroup(tmp / "sentinel") as group:
        group.sentinels, group.master_name            # "127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3", "mymaster"
        old = group.kill_primary()                    # kill -9 the primary the sentinels name
        group.wait_failover(old)                      # the sentinels name the promoted replica

    with TlsRedis(tmp / "tls") as tls:
        tls.port, tls.ca_file, tls.client_cert_file, tls.client_key_file, tls.wrong_ca_file
        tls.client().ping()                           # redis-py with the CA, the client certificate, the user

Each has `env()`: the gateway's LLMGW_REDIS_* settings for it (mode, URL or sentinels and master name;
for TLS the CA, the client certificate and key, full verification, the ACL user and password).

Everything is Debian's `redis-server` (7.0: cluster mode, TLS, and Sentinel as `redis-server CONF
--sentinel`, which is what the redis-sentinel package runs). Each topology lives in a directory of its
own under `workdir` (configuration, node files, certificates and keys, one log per process); starting
fails with the tail of the log of the process that did not come up. `stop()` (also on leaving the
`with` block, and for whatever is left at interpreter exit) stops every process: SIGTERM, SIGKILL after
5 s; then the directory is removed. Nothing persists (no RDB, no append-only file).

Short timeouts make failovers quick: cluster-node-timeout 1000 ms (a replica takes a dead primary's slots
over in about 2-3 s), sentinels' down-after-milliseconds 1000 and failover-timeout 3000.
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import secrets
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.poll import wait_until
from tests.support.procs import free_port

__all__ = [
    "REDIS_CLI",
    "REDIS_SERVER",
    "CertAuthority",
    "RedisCluster",
    "SentinelGroup",
    "TlsRedis",
    "key_slot",
]

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
HOST = "127.0.0.1"
STOP_TIMEOUT_S = 5.0
START_TIMEOUT_S = 20.0

# Every process any topology started and has not stopped yet: killed at interpreter exit, so that an
# interrupted test run leaves no redis-server behind.
_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _LIVE.clear()


def _binary() -> str:
    if REDIS_SERVER is None:
        raise RuntimeError("redis-server is not on PATH (apt install redis-server)")
    return REDIS_SERVER


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def key_slot(key: str) -> int:
    """The cluster slot of `key` (CRC16/XMODEM of the hash tag, else of the key, mod 16384)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    crc = 0
    for byte in key.encode():
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


@dataclass
class _Process:
    """One redis-server (data node or sentinel) on 127.0.0.1:`port`, with its configuration and log."""

    name: str
    port: int
    conf: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [_binary(), str(self.conf), *extra],
            cwd=self.conf.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        _LIVE.add(self.proc)

    def check_running(self) -> None:
        """Raise (with the log's tail) if the process has exited; for `wait_until(fail=...)`."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} (port {self.port}) exited with {self.proc.returncode}:\n{_tail(self.log)}"
            )

    def kill(self) -> None:
        """kill -9, at once."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            _LIVE.discard(self.proc)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def reap(self) -> None:
        """Wait for a terminated process; SIGKILL it if it outlives STOP_TIMEOUT_S."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        _LIVE.discard(self.proc)


def _conf_lines(port: int, workdir: Path, log: Path) -> list[str]:
    """What every data node shares: loopback only, no persistence, a log file."""
    return [
        f"port {port}",
        f"bind {HOST}",
        f'dir "{workdir}"',
        f'logfile "{log}"',
        'save ""',
        "appendonly no",
        "daemonize no",
        # A replica gets its first copy at once (the default waits 5 s for more replicas to share it).
        "repl-diskless-sync-delay 0",
    ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Topology:
    """Processes in one directory, stopped together (SIGTERM to all, then each reaped) and the directory
    removed."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.processes: list[_Process] = []
        self._started = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._started = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        raise NotImplementedError

    def _process(self, name: str, port: int | None = None) -> _Process:
        port = port or free_port()
        proc_dir = self.workdir / name
        proc_dir.mkdir(parents=True, exist_ok=True)
        process = _Process(name, port, proc_dir / f"{name}.conf", proc_dir / f"{name}.log")
        self.processes.append(process)
        return process

    def stop(self, *, keep_files: bool = False) -> None:
        """Stop every process (SIGTERM, SIGKILL after 5 s) and remove the directory (unless `keep_files`)."""
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            p.reap()
        if not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self, lines: int = 15) -> str:
        """The tail of every process's log, for an assertion message."""
        return "\n".join(f"--- {p.name} ({p.address}):\n{_tail(p.log, lines)}" for p in self.processes)


def _client(port: int, **kwargs: Any) -> redis.Redis:
    """A redis-py client that tries once: a refusal is an answer here, not something to retry."""
    options: dict[str, Any] = {
        "socket_connect_timeout": 0.5,
        "socket_timeout": 1.0,
        "retry": Retry(NoBackoff(), 0),
    }
    return redis.Redis(HOST, port, **(options | kwargs))


def _info(port: int, section: str, **kwargs: Any) -> dict[str, str]:
    """INFO `section` of the node on `port` as text fields; {} when it does not answer."""
    try:
        with _client(port, **kwargs) as c:
            raw = c.execute_command("INFO", section)
    except redis.RedisError:
        return {}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    if isinstance(raw, dict):  # redis-py parses INFO itself
        return {_text(k): _text(v) for k, v in raw.items()}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


# --- Redis Cluster ------------------------------------------------------------------------------------


class RedisCluster(_Topology):
    """`primaries` primaries (3 by default), each with `replicas_per_primary` replicas, made one cluster by
    `redis-cli --cluster create` and ready once every node says `cluster_state:ok` and knows every other
    node (and every replica's link to its primary is up)."""

    def __init__(
        self,
        workdir: Path,
        primaries: int = 3,
        replicas_per_primary: int = 0,
        *,
        node_timeout_ms: int = 1000,
    ) -> None:
        super().__init__(workdir)
        if primaries < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 primaries")
        self.primaries = primaries
        self.replicas_per_primary = replicas_per_primary
        self.node_timeout_ms = node_timeout_ms

    @property
    def nodes(self) -> list[_Process]:
        return self.processes

    @property
    def seeds(self) -> list[str]:
        """host:port of every node, as a cluster client's startup nodes."""
        return [p.address for p in self.nodes]

    @property
    def url(self) -> str:
        return f"redis://{self.nodes[0].address}"

    def env(self) -> dict[str, str]:
        """The gateway's settings for this cluster (LLMGW_REDIS_*)."""
        return {"LLMGW_REDIS_MODE": "cluster", "LLMGW_REDIS_URL": self.url}

    def _start(self) -> None:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli is not on PATH (apt install redis-tools)")
        count = self.primaries * (1 + self.replicas_per_primary)
        for i in range(count):
            node = self._process(f"node-{i}")
            lines = _conf_lines(node.port, node.conf.parent, node.log) + [
                "cluster-enabled yes",
                f'cluster-config-file "nodes-{node.port}.conf"',
                f"cluster-node-timeout {self.node_timeout_ms}",
                # The bus on a port of its own: port + 10000 may be taken or above 65535.
                f"cluster-port {free_port()}",
                # A replica takes over however long its link was down (no data-age check): tests kill
                # primaries right after writing.
                "cluster-replica-validity-factor 0",
                # Keys of the surviving shards stay served while one shard has no primary.
                "cluster-require-full-coverage no",
            ]
            node.conf.write_text("\n".join(lines) + "\n")
            node.start()
        for node in self.nodes:
            wait_until(
                lambda n=node: _info(n.port, "server"),  # type: ignore[misc]
                f"{node.name} to answer",
                timeout=START_TIMEOUT_S,
                interval=0.02,
                fail=node.check_running,
            )
        create = subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *self.seeds,
                "--cluster-replicas",
                str(self.replicas_per_primary),
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        if create.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed ({create.returncode}):\n"
                f"{create.stdout.decode(errors='replace')}\n{create.stderr.decode(errors='replace')}"
            )
        self.wait_ok()

    def _check_all_running(self) -> None:
        for node in self.nodes:
            if node.alive or node.proc is None:
                continue
            # Only nodes the test killed may be gone (kill() reaps them; a crash leaves a returncode).
            if node.proc.returncode not in (-signal.SIGKILL, -signal.SIGTERM):
                node.check_running()

    def wait_ok(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every live node says cluster_state:ok, knows every node, and sees all 16384 slots
        served, and every live replica's link to its primary is up."""
        live = [n for n in self.nodes if n.alive]
        seen: dict[str, str] = {}

        def ok() -> bool:
            seen.clear()
            for node in live:
                info = _cluster_info(node.port)
                seen[node.name] = (
                    f"state={info.get('cluster_state')} known={info.get('cluster_known_nodes')} "
                    f"slots_ok={info.get('cluster_slots_ok')}"
                )
                if (
                    info.get("cluster_state") != "ok"
                    or info.get("cluster_known_nodes") != str(len(self.nodes))
                    or info.get("cluster_slots_ok") != "16384"
                ):
                    return False
                repl = _info(node.port, "replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    seen[node.name] += " replica link down"
                    return False
            return True

        wait_until(
            ok,
            lambda: f"the cluster to be ok: {seen}\n{self.logs(5)}",
            timeout=timeout,
            interval=0.1,
            fail=self._check_all_running,
        )

    def _any_live(self) -> _Process:
        for node in self.nodes:
            if node.alive:
                return node
        raise RuntimeError("no cluster node is running")

    def node_at(self, address: str) -> _Process:
        for node in self.nodes:
            if node.address == address:
                return node
        raise KeyError(address)

    def primary_of(self, key_or_slot: str | int, *, ask: _Process | None = None) -> str:
        """host:port of the primary serving `key_or_slot` (a key, or a slot number), as the node `ask`
        (default: any live node) sees it in CLUSTER SLOTS."""
        slot = key_or_slot if isinstance(key_or_slot, int) else key_slot(key_or_slot)
        node = ask or self._any_live()
        with _client(node.port) as c:
            ranges = c.execute_command("CLUSTER SLOTS")
        for entry in _slot_ranges(ranges):
            start, end, primary = entry
            if start <= slot <= end:
                return primary
        raise LookupError(f"slot {slot} is not served (as {node.name} sees it)")

    def replicas_of(self, primary: str) -> list[str]:
        """host:port of the replicas of `primary` (CLUSTER REPLICAS)."""
        node = self.node_at(primary)
        with _client(node.port) as c:
            node_id = c.execute_command("CLUSTER MYID")
            node_id = node_id.decode() if isinstance(node_id, bytes) else node_id
            lines = c.execute_command("CLUSTER REPLICAS", node_id)
        out = []
        for line in lines:
            text = line.decode() if isinstance(line, bytes) else str(line)
            out.append(text.split()[1].split("@", 1)[0])
        return out

    def kill_primary_of(self, key_or_slot: str | int) -> str:
        """kill -9 the primary serving `key_or_slot` (e.g. "{llmgw}", the limiter's hash tag); returns
        its host:port. With replicas, one of them takes the slots over: `wait_failover`."""
        address = self.primary_of(key_or_slot)
        self.node_at(address).kill()
        return address

    def wait_failover(self, key_or_slot: str | int, old: str, timeout: float = 20.0) -> str:
        """Wait until every live node sees `key_or_slot` served by a live primary other than `old` and the
        cluster is ok again; returns the new primary's host:port."""
        seen: list[str] = []

        def moved() -> str:
            try:
                views = {self.primary_of(key_or_slot, ask=n) for n in self.nodes if n.alive}
            except (LookupError, redis.RedisError) as e:
                seen.append(repr(e))
                return ""
            seen.append(str(views))
            if len(views) != 1:
                return ""
            (new,) = views
            if new == old or not self.node_at(new).alive:
                return ""
            role = _info(self.node_at(new).port, "replication").get("role")
            return new if role == "master" else ""

        new = wait_until(
            moved,
            lambda: f"a replica of {old} to take over (last views: {seen[-3:]})\n{self.logs(8)}",
            timeout=timeout,
            interval=0.1,
        )
        wait_until(
            lambda: all(_cluster_info(n.port).get("cluster_state") == "ok" for n in self.nodes if n.alive),
            "cluster_state:ok on every live node after the failover",
            timeout=timeout,
            interval=0.1,
        )
        return new


def _cluster_info(port: int) -> dict[str, str]:
    try:
        with _client(port) as c:
            raw = c.execute_command("CLUSTER INFO")
    except redis.RedisError:
        return {}
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)


def _slot_ranges(raw: Any) -> list[tuple[int, int, str]]:
    """(first slot, last slot, primary host:port) from CLUSTER SLOTS, raw or as redis-py parsed it."""
    out: list[tuple[int, int, str]] = []
    if isinstance(raw, dict):  # redis-py: {(start, end): {"primary": (host, port), ...}}
        for (start, end), entry in raw.items():
            host, port = entry["primary"][:2]
            host = host.decode() if isinstance(host, bytes) else host
            out.append((int(start), int(end), f"{host}:{int(port)}"))
        return out
    for entry in raw:
        host, port = entry[2][0], entry[2][1]
        host = host.decode() if isinstance(host, bytes) else host
        out.append((int(entry[0]), int(entry[1]), f"{host}:{int(port)}"))
    return out


# --- Sentinel ----------------------------------------------------------------------------------------


class SentinelGroup(_Topology):
    """A primary, `replicas` replicas (`replicaof` it) and `sentinel_count` sentinels monitoring it as
    `master_name` (quorum 2); ready once every sentinel knows the primary, every replica and every
    other sentinel, so that a failover can be agreed on at once."""

    def __init__(
        self,
        workdir: Path,
        *,
        master_name: str = "mymaster",
        replicas: int = 1,
        sentinel_count: int = 3,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
    ) -> None:
        super().__init__(workdir)
        self.master_name = master_name
        self.replica_count = replicas
        self.sentinel_count = sentinel_count
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.data: list[_Process] = []
        self.sentinel_processes: list[_Process] = []

    @property
    def sentinels(self) -> str:
        """ "host:port,host:port,host:port", as LLMGW_REDIS_SENTINELS takes them."""
        return ",".join(p.address for p in self.sentinel_processes)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(HOST, p.port) for p in self.sentinel_processes]

    def env(self) -> dict[str, str]:
        """The gateway's settings for this group (LLMGW_REDIS_*)."""
        return {
            "LLMGW_REDIS_MODE": "sentinel",
            "LLMGW_REDIS_SENTINELS": self.sentinels,
            "LLMGW_REDIS_SENTINEL_MASTER": self.master_name,
        }

    def _start(self) -> None:
        primary = self._process("primary")
        primary.conf.write_text("\n".join(_conf_lines(primary.port, primary.conf.parent, primary.log)) + "\n")
        self.data.append(primary)
        for i in range(self.replica_count):
            replica = self._process(f"replica-{i}")
            lines = _conf_lines(replica.port, replica.conf.parent, replica.log)
            replica.conf.write_text("\n".join([*lines, f"replicaof {HOST} {primary.port}"]) + "\n")
            self.data.append(replica)
        for p in self.data:
            p.start()
        # Each sentinel is told its own id, the other sentinels and the replicas up front (the lines it
        # would write into its file once it found them: hello messages every 2 s, INFO every 10 s), so
        # the group can agree on a failover as soon as it starts.
        sentinels = [self._process(f"sentinel-{i}") for i in range(self.sentinel_count)]
        ids = {s.name: secrets.token_hex(20) for s in sentinels}
        name = self.master_name
        for sentinel in sentinels:
            # The sentinel rewrites this file (known replicas and sentinels, epochs): it must be writable.
            lines = [
                f"port {sentinel.port}",
                f"bind {HOST}",
                f'dir "{sentinel.conf.parent}"',
                f'logfile "{sentinel.log}"',
                "daemonize no",
                f"sentinel myid {ids[sentinel.name]}",
                f"sentinel monitor {name} {HOST} {primary.port} {self.quorum}",
                f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
                f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {name} 1",
            ]
            lines += [f"sentinel known-replica {name} {HOST} {r.port}" for r in self.data[1:]]
            lines += [
                f"sentinel known-sentinel {name} {HOST} {other.port} {ids[other.name]}"
                for other in sentinels
                if other is not sentinel
            ]
            sentinel.conf.write_text("\n".join(lines) + "\n")
            sentinel.start("--sentinel")
            self.sentinel_processes.append(sentinel)
        self.wait_ready()

    def _check_all_running(self) -> None:
        for p in self.processes:
            if p.proc is not None and p.proc.returncode is None:
                p.check_running()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Every live replica's link is up; every live sentinel sees the primary up, every live replica,
        and every other live sentinel."""
        replicas = sum(1 for p in self.data if p.alive) - 1
        others = sum(1 for p in self.sentinel_processes if p.alive) - 1
        seen: dict[str, str] = {}

        def ready() -> bool:
            seen.clear()
            for p in self.data:
                if not p.alive:
                    continue
                repl = _info(p.port, "replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    seen[p.name] = "link down"
                    return False
            for s in self.sentinel_processes:
                if not s.alive:
                    continue
                master = self._master_state(s)
                seen[s.name] = str(master)
                if (
                    master.get("flags") != "master"
                    or int(master.get("num-slaves", -1)) < replicas
                    or int(master.get("num-other-sentinels", -1)) < others
                ):
                    return False
            return True

        wait_until(
            ready,
            lambda: f"the sentinel group to be ready: {seen}\n{self.logs(5)}",
            timeout=timeout,
            interval=0.1,
            fail=self._check_all_running,
        )

    def _master_state(self, sentinel: _Process) -> dict[str, str]:
        try:
            with _client(sentinel.port) as c:
                raw = c.execute_command("SENTINEL", "MASTER", self.master_name)
        except redis.RedisError:
            return {}
        if isinstance(raw, dict):
            return {_text(k): _text(v) for k, v in raw.items()}
        items = [_text(x) for x in raw]
        return dict(zip(items[::2], items[1::2], strict=True))

    def current_primary(self) -> str:
        """host:port of the primary, as the first live sentinel names it (SENTINEL
        get-master-addr-by-name)."""
        errors = []
        for s in self.sentinel_processes:
            if not s.alive:
                continue
            try:
                with _client(s.port) as c:
                    raw = c.execute_command("SENTINEL", "get-master-addr-by-name", self.master_name)
            except redis.RedisError as e:
                errors.append(f"{s.name}: {e}")
                continue
            host, port = (x.decode() if isinstance(x, bytes) else str(x) for x in raw)
            return f"{host}:{port}"
        raise RuntimeError(f"no sentinel answered: {errors}")

    def node_at(self, address: str) -> _Process:
        for p in self.data:
            if p.address == address:
                return p
        raise KeyError(address)

    @property
    def primary(self) -> _Process:
        return self.node_at(self.current_primary())

    def kill_primary(self) -> str:
        """kill -9 the current primary (as the sentinels name it); returns its host:port."""
        address = self.current_primary()
        self.node_at(address).kill()
        return address

    def wait_failover(self, old: str, timeout: float = 30.0) -> str:
        """Wait until every live sentinel names a primary other than `old`, and that node says it is a
        master; returns its host:port."""
        seen: list[str] = []

        def promoted() -> str:
            views = set()
            for s in self.sentinel_processes:
                if not s.alive:
                    continue
                try:
                    with _client(s.port) as c:
                        raw = c.execute_command("SENTINEL", "get-master-addr-by-name", self.master_name)
                except redis.RedisError as e:
                    seen.append(repr(e))
                    return ""
                views.add(":".join(x.decode() if isinstance(x, bytes) else str(x) for x in raw))
            seen.append(str(views))
            if len(views) != 1:
                return ""
            (new,) = views
            if new == old:
                return ""
            role = _info(self.node_at(new).port, "replication").get("role")
            return new if role == "master" else ""

        return wait_until(
            promoted,
            lambda: f"the sentinels to promote a replica of {old} (last: {seen[-3:]})\n{self.logs(8)}",
            timeout=timeout,
            interval=0.1,
        )


# --- TLS ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CertAuthority:
    """A CA generated for a test: its certificate file, and the key that signs leaf certificates."""

    name: str
    cert_file: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @staticmethod
    def create(directory: Path, name: str) -> CertAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        cert_file = directory / f"{name}-ca.crt"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return CertAuthority(name, cert_file, key, cert)

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        server: bool,
        dns: Sequence[str] = ("localhost",),
        ips: Sequence[str] = (HOST,),
    ) -> tuple[Path, Path]:
        """A leaf certificate signed by this CA (server: SANs `dns` and `ips`, serverAuth; else a client
        certificate, clientAuth); returns (certificate file, key file), the key readable by its owner only."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = directory / f"{name}.crt"
        key_file = directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.touch(mode=0o600)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


class TlsRedis(_Topology):
    """A redis-server that speaks TLS only (`port 0`, `tls-port`), asks every client for a certificate
    signed by the test's CA (`tls-auth-clients yes`), and, with `username`, has the default user switched
    off and one ACL user (`user gw on >secret ~* &* +@all`): clients must AUTH as it.

    Files: `ca_file` (the CA), `server_cert_file` / `server_key_file` (SANs 127.0.0.1 and localhost),
    `client_cert_file` / `client_key_file`, `wrong_ca_file` (an unrelated CA: a client that trusts only it
    must refuse the server) with `wrong_client_cert_file` / `wrong_client_key_file` (a client certificate
    that CA signed: the server must refuse it)."""

    def __init__(self, workdir: Path, *, username: str | None = "gw", password: str = "secret") -> None:
        super().__init__(workdir)
        self.username = username
        self.password = password
        self.certs = workdir / "certs"

    @property
    def server(self) -> _Process:
        return self.processes[0]

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        """rediss://127.0.0.1:port (no credentials: they go in LLMGW_REDIS_USERNAME / _PASSWORD)."""
        return f"rediss://{HOST}:{self.port}"

    def _start(self) -> None:
        self.certs.mkdir(parents=True, exist_ok=True)
        ca = CertAuthority.create(self.certs, "test")
        self.ca_file = ca.cert_file
        self.server_cert_file, self.server_key_file = ca.issue(self.certs, "server", server=True)
        self.client_cert_file, self.client_key_file = ca.issue(self.certs, "client", server=False)
        wrong = CertAuthority.create(self.certs, "unrelated")
        self.wrong_ca_file = wrong.cert_file
        self.wrong_client_cert_file, self.wrong_client_key_file = wrong.issue(
            self.certs, "unrelated-client", server=False
        )
        server = self._process("tls")
        lines = _conf_lines(0, server.conf.parent, server.log) + [
            f"tls-port {server.port}",
            f'tls-cert-file "{self.server_cert_file}"',
            f'tls-key-file "{self.server_key_file}"',
            f'tls-ca-cert-file "{self.ca_file}"',
            "tls-auth-clients yes",
        ]
        if self.username is not None:
            lines += ["user default off", f"user {self.username} on >{self.password} ~* &* +@all"]
        server.conf.write_text("\n".join(lines) + "\n")
        server.start()
        seen: list[str] = []

        def pong() -> bool:
            try:
                with self.client() as c:
                    return bool(c.ping())
            except redis.RedisError as e:
                seen.append(repr(e))
                return False

        wait_until(
            pong,
            lambda: f"the TLS server to answer PING (last: {seen[-1:]})",
            timeout=START_TIMEOUT_S,
            interval=0.05,
            fail=server.check_running,
        )

    def client(
        self,
        *,
        ca_file: Path | None = None,
        cert: bool = True,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> redis.Redis:
        """A redis-py client over TLS: this server's CA (or `ca_file`), the client certificate unless
        `cert=False`, and the ACL user (or `username` / `password`)."""
        tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(ca_file or self.ca_file)}
        if cert:
            tls |= {"ssl_certfile": str(self.client_cert_file), "ssl_keyfile": str(self.client_key_file)}
        auth: dict[str, Any] = {}
        if self.username is not None:
            auth = {"username": username or self.username, "password": password or self.password}
        return _client(self.port, **tls, **auth, **kwargs)

    def env(self) -> dict[str, str]:
        """The gateway's settings for this server (LLMGW_REDIS_*), full verification."""
        env = {
            "LLMGW_REDIS_MODE": "standalone",
            "LLMGW_REDIS_URL": self.url,
            "LLMGW_REDIS_TLS": "true",
            "LLMGW_REDIS_TLS_CA_FILE": str(self.ca_file),
            "LLMGW_REDIS_TLS_CERT_FILE": str(self.client_cert_file),
            "LLMGW_REDIS_TLS_KEY_FILE": str(self.client_key_file),
            "LLMGW_REDIS_TLS_VERIFY": "full",
        }
        if self.username is not None:
            env |= {"LLMGW_REDIS_USERNAME": self.username, "LLMGW_REDIS_PASSWORD": self.password}
        return env
