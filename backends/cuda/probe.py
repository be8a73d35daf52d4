"""Is there a usable CUDA device here? Imports CuPy only when asked, and says why not in one line."""
from __future__ import annotations

from llamay_core.backend_api import Availability

MIN_COMPUTE_CAPABILITY = (7, 0)  # the prefill tiles use tensor cores (WMMA f16)
INSTALL_HINT = "pip install 'llamay[cuda]'"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def probe_cuda() -> Availability:
    try:
        import cupy
        from cupy_backends.cuda.api.runtime import CUDARuntimeError
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "cupy"
        return Availability(False, reason=f"CuPy is not installed ({missing} missing; {INSTALL_HINT})")
    except Exception as exc:  # a broken CuPy install must not break `llamay version`
        return Availability(False, reason=f"CuPy failed to import: {first_line(exc)}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return Availability(False, reason="no CUDA device found")
        props = cupy.cuda.runtime.getDeviceProperties(0)
        runtime_version = cupy.cuda.runtime.runtimeGetVersion()
        driver_version = cupy.cuda.runtime.driverGetVersion()
    except CUDARuntimeError as exc:
        return Availability(False, reason=f"no usable CUDA driver or device: {first_line(exc)}")
    except (RuntimeError, OSError) as exc:
        return Availability(False, reason=f"CUDA libraries failed to load: {first_line(exc)}")
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    cc = (int(props["major"]), int(props["minor"]))
    if cc < MIN_COMPUTE_CAPABILITY:
        return Availability(False, reason=f"{name} is sm_{cc[0]}{cc[1]}; the cuda backend needs sm_70 or newer")
    memory_gib = int(props["totalGlobalMem"]) / 2**30
    return Availability(
        True,
        device=f"{name} (sm_{cc[0]}{cc[1]}, {memory_gib:.0f} GiB), CuPy {cupy.__version__}",
        details={"devices": count, "compute capability": f"{cc[0]}.{cc[1]}", "memory GiB": round(memory_gib, 1),
                 "cuda runtime": version_text(runtime_version), "driver supports cuda": version_text(driver_version)},
    )


def version_text(v: int) -> str:
    """CUDA's integer versions: 12090 -> 12.9."""
    return f"{v // 1000}.{v % 1000 // 10}"
