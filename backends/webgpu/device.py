"""Finding a WebGPU adapter and opening a device. wgpu is imported here, and only when asked for."""
from __future__ import annotations

from typing import Any

import attrs

# The limits worth printing in `llamay version -v`; the device is opened with the adapter's own
# values for the first three so big GPUs bind big buffers (WebGPU's defaults are 128/256 MiB).
REPORTED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
                   "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                   "max-compute-workgroups-per-dimension", "min-storage-buffer-offset-alignment",
                   "min-uniform-buffer-offset-alignment")
RAISED_LIMITS = REPORTED_LIMITS[:3]


@attrs.frozen
class Gpu:
    """An open device and what it was opened on."""

    wgpu: Any = attrs.field(repr=False)
    adapter: Any = attrs.field(repr=False)
    device: Any = attrs.field(repr=False)
    name: str
    details: dict

    @property
    def max_binding_bytes(self) -> int:
        return int(self.device.limits["max-storage-buffer-binding-size"])

    @property
    def uniform_alignment(self) -> int:
        return max(256, int(self.device.limits["min-uniform-buffer-offset-alignment"]))


class NoAdapter(Exception):
    """No usable WebGPU adapter here; the message is the one-line reason."""


def open_gpu() -> Gpu:
    """Import wgpu, request the high-performance adapter and open a device on it."""
    try:
        import wgpu
    except ImportError as exc:
        raise NoAdapter(f"wgpu is not installed ({exc}); pip install 'llamay[webgpu]'") from None
    except OSError as exc:  # the bundled wgpu-native library failed to load
        raise NoAdapter(f"wgpu-native failed to load: {first_line(exc)}") from None
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as exc:  # wgpu raises RuntimeError, or its own error types, when none is found
        raise NoAdapter(f"no WebGPU adapter: {first_line(exc)}") from None
    if adapter is None:
        raise NoAdapter("no WebGPU adapter (no Vulkan, Metal, D3D12 or GL driver found)")
    limits = {k: adapter.limits[k] for k in RAISED_LIMITS if k in adapter.limits}
    try:
        device = adapter.request_device_sync(required_limits=limits)
    except Exception as exc:
        raise NoAdapter(f"could not open a WebGPU device: {first_line(exc)}") from None
    info = adapter.info
    lim = device.limits
    details = {
        "device": info.get("device", ""),
        "device type": str(info.get("adapter_type", "")).lower(),
        "driver": f"{info.get('vendor', '')} ({info.get('description', '')})",
        "api version": f"WebGPU over {info.get('backend_type', '?')} (wgpu-py {wgpu.__version__}, "
                       f"wgpu-native {getattr(wgpu.backends.wgpu_native, '__version__', '?')})",
        "limits": " · ".join(f"{key} {lim[key]}" for key in REPORTED_LIMITS if key in lim),
        # The features a compute backend could use; the adapter lists many graphics ones too.
        "features": ", ".join(f for f in sorted(adapter.features)
                              if f.startswith(("shader-", "subgroup", "timestamp", "immediates"))),
    }
    name = f"{info.get('device', 'unknown adapter')} ({info.get('backend_type', '?')}, {info.get('description', '')})"
    return Gpu(wgpu=wgpu, adapter=adapter, device=device, name=name, details=details)


def first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]
