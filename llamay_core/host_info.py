"""Facts about the host CPU that reports and backends print (no backend-specific knowledge)."""
from __future__ import annotations

import os

SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "neon", "asimd", "i8mm")


def cpu_features() -> list[str]:
    """The SIMD extensions of SIMD_FLAGS this CPU reports (Linux /proc/cpuinfo; [] elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in SIMD_FLAGS if w in have]
    except OSError:
        pass
    return []


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask where the platform has one, else every
    CPU the OS reports."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
