"""The /proc probes: a process's RSS and CPU time, and how busy each core was between two probes."""

from __future__ import annotations

import os
from dataclasses import dataclass


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key.lower() + "_mb"] = round(int(rest.split()[0]) / 1024, 1)
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times() -> dict[int, tuple[int, int, int]]:
    """Per-CPU (busy, total, steal) jiffies from /proc/stat."""
    out: dict[int, tuple[int, int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals]
                idle = v[3] + v[4]
                out[int(name[3:])] = (sum(v[:8]) - idle, sum(v[:8]), v[7] if len(v) > 7 else 0)
    return out


@dataclass(frozen=True, slots=True)
class CpuProbe:
    t_cpu: dict[int, tuple[int, int, int]]
    gateway_s: float
    upstream_s: float

    @classmethod
    def take(cls, gw_pid: int, up_pid: int) -> CpuProbe:
        return cls(cpu_times(), proc_cpu_seconds(gw_pid), proc_cpu_seconds(up_pid))

    def since(self, start: CpuProbe, requests: int, gw_cpu: int, load_cpu: int) -> dict[str, float | None]:
        """CPU use between two probes (None where unknown: JSON has no NaN)."""

        def share(cpu: int, field: int) -> float | None:
            if cpu not in self.t_cpu or cpu not in start.t_cpu:
                return None
            t = self.t_cpu[cpu][1] - start.t_cpu[cpu][1]
            return round((self.t_cpu[cpu][field] - start.t_cpu[cpu][field]) / t, 3) if t else None

        gw = self.gateway_s - start.gateway_s
        return {
            "gateway_cpu_s": round(gw, 3),
            "upstream_cpu_s": round(self.upstream_s - start.upstream_s, 3),
            "gateway_cpu_us_per_req": round(gw / requests * 1e6, 1) if requests else None,
            "gateway_core_busy": share(gw_cpu, 0),
            "load_core_busy": share(load_cpu, 0),
            "gateway_core_steal": share(gw_cpu, 2),
            "load_core_steal": share(load_cpu, 2),
        }
