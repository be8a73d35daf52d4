"""KV pages in device buffers, one per layer: page p holds K [slot][width] then V [slot][width]."""
from __future__ import annotations

import numpy as np

from llamay_backends.vulkan.device import Buffer, Device
from llamay_core.backend_api import KvSpec
from llamay_core.state.host_pages import standard_encoding
from llamay_core.errors import BackendError

ELEMENT_BYTES = {"f32": 4, "f16": 2}


class VulkanPageStore:
    """Page bytes on the device; read/write/copy a page across all layers for snapshots and forks."""

    def __init__(self, device: Device, spec: KvSpec) -> None:
        if spec.dtype not in ELEMENT_BYTES:
            raise BackendError(f"vulkan stores KV as f32 or f16, not {spec.dtype}")
        self.device, self.spec = device, spec
        self.encoding = standard_encoding(spec)
        self.k_width = spec.n_kv_heads * spec.key_dim
        self.v_width = spec.n_kv_heads * spec.value_dim
        self.layer_page_bytes = spec.page_size * (self.k_width + self.v_width) * ELEMENT_BYTES[spec.dtype]
        layer_bytes = self.layer_page_bytes * spec.max_pages
        if layer_bytes > device.max_binding:
            raise BackendError(f"one layer's KV cache needs {layer_bytes / 2**20:.0f} MiB, more than this device's "
                               f"storage binding of {device.max_binding / 2**20:.0f} MiB: use a shorter context "
                               "or fewer sequences")
        # Not cleared: attention reads only positions already written, and clearing would touch
        # every page of a long context up front.
        self.layers = [Buffer(device, layer_bytes, host_visible=False) for _ in range(spec.n_layers)]
        self.kernel_suffix = spec.dtype

    def _check(self, page: int) -> None:
        if not 0 <= page < self.spec.max_pages:
            raise IndexError(f"page {page} outside 0..{self.spec.max_pages - 1}")

    def read_page(self, page: int) -> bytes:
        self._check(page)
        n = self.layer_page_bytes
        return b"".join(buf.read(page * n, n) for buf in self.layers)

    def write_page(self, page: int, data: bytes) -> None:
        self._check(page)
        n = self.layer_page_bytes
        if len(data) != n * len(self.layers):
            raise ValueError(f"page data is {len(data)} bytes, expected {n * len(self.layers)}")
        raw = np.frombuffer(data, np.uint8)
        for i, buf in enumerate(self.layers):
            buf.write(raw[i * n:(i + 1) * n], page * n)

    def copy_page(self, src: int, dst: int) -> None:
        self._check(src)
        self._check(dst)
        n = self.layer_page_bytes

        def record(cb):
            for buf in self.layers:
                self.device.copy(cb, buf, src * n, buf, dst * n, n)
            self.device.barrier(cb)

        self.device.one_shot(record)

    def release(self) -> None:
        for buf in self.layers:
            buf.release()
