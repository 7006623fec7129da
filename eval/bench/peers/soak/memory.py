"""The gateway's memory from /proc (VmRSS, VmHWM, RssAnon, RssFile, PSS, USS) and a thread sampling it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence


def _kb_fields(text: str, keys: Sequence[str]) -> dict[str, int]:
    """`Key:   1234 kB` lines of a /proc file, the wanted keys only, in kB."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key in keys:
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0])
    return out


def parse_status(text: str) -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon and RssFile of /proc/<pid>/status, in MB."""
    kb = _kb_fields(text, ("VmRSS", "VmHWM", "RssAnon", "RssFile"))
    names = {"VmRSS": "rss_mb", "VmHWM": "hwm_mb", "RssAnon": "anon_mb", "RssFile": "file_mb"}
    return {names[k]: round(v / 1024, 2) for k, v in kb.items()}


def parse_smaps_rollup(text: str) -> dict[str, float]:
    """PSS and USS (private clean + private dirty) of /proc/<pid>/smaps_rollup, in MB. USS is what the
    process alone holds: the pages a leak adds, without the shared libraries RSS also counts."""
    kb = _kb_fields(text, ("Pss", "Private_Clean", "Private_Dirty"))
    out: dict[str, float] = {}
    if "Pss" in kb:
        out["pss_mb"] = round(kb["Pss"] / 1024, 2)
    if "Private_Clean" in kb and "Private_Dirty" in kb:
        out["uss_mb"] = round((kb["Private_Clean"] + kb["Private_Dirty"]) / 1024, 2)
    return out


def read_memory(pid: int) -> dict[str, float]:
    """The status figures, plus PSS/USS when smaps_rollup is readable (Linux >= 4.14, same user)."""
    with open(f"/proc/{pid}/status") as f:
        out = parse_status(f.read())
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            out.update(parse_smaps_rollup(f.read()))
    return out


class Sampler:
    """A thread reading the gateway's memory every `interval` seconds."""

    def __init__(self, pid: int, interval: float, t0: float) -> None:
        self.pid, self.interval, self.t0 = pid, interval, t0
        self.samples: list[dict[str, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def take(self) -> None:
        t = time.monotonic() - self.t0
        try:
            mem = read_memory(self.pid)
        except OSError as exc:
            self.errors.append(f"t={t:.0f}s: {exc}")
            return
        self.samples.append({"t_s": round(t, 2), **mem})

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.take()

    def __enter__(self) -> Sampler:
        self.take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.take()
