"""Is Metal usable here? Only on macOS with pyobjc-framework-Metal and a Metal device."""
from __future__ import annotations

import platform
import sys

from llamay_core.backend_api import Availability


def probe_metal() -> Availability:
    if sys.platform != "darwin":
        return Availability(False, reason=f"Metal exists only on macOS (this is {platform.system() or sys.platform})")
    try:
        import Metal
    except ImportError:
        return Availability(False, reason="pyobjc-framework-Metal is not installed (pip install 'llamay[metal]')")
    device = Metal.MTLCreateSystemDefaultDevice()
    if device is None:
        return Availability(False, reason="no Metal device")
    return Availability(True, device=f"{device.name()} (Metal, not run-verified by conformance)",
                        details={"unified memory": bool(device.hasUnifiedMemory()),
                                 "recommended working set GiB": round(device.recommendedMaxWorkingSetSize() / 2**30, 1)})
