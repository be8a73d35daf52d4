"""KV pages in device buffers: per layer one K and one V buffer of [max_pages * page_size, width]."""
from __future__ import annotations

import numpy as np

from llamay_core.backend_api import KvSpec
from llamay_core.state.host_pages import standard_encoding
from llamay_core.errors import UsageError
from llamay_backends.webgpu.device import Gpu


class WebGPUPageStore:
    """Page bytes live on the device; read/write/copy go through the queue.

    A page's bytes are each layer's K then V rows for that page, in layer order (the same
    encoding as the reference store's f32 pages).
    """

    def __init__(self, gpu: Gpu, spec: KvSpec) -> None:
        if spec.dtype != "f32":
            raise UsageError(f"webgpu stores KV as f32 only, not {spec.dtype}")
        self.gpu, self.spec = gpu, spec
        self.encoding = standard_encoding(spec)
        usage = gpu.wgpu.BufferUsage
        self.widths = [spec.n_kv_heads * spec.key_dim, spec.n_kv_heads * spec.value_dim]
        rows = spec.max_pages * spec.page_size
        for width in self.widths:
            if rows * width * 4 > gpu.max_binding_bytes:
                raise UsageError(f"KV cache of {rows} tokens needs {rows * width * 4 >> 20} MiB per layer, over the "
                                 f"device's {gpu.max_binding_bytes >> 20} MiB binding limit: use a smaller context")
        self.buffers = []  # k0, v0, k1, v1, ...
        for layer in range(spec.n_layers):
            for name, width in zip("kv", self.widths):
                self.buffers.append(gpu.device.create_buffer(
                    label=f"{name}_cache.{layer}", size=max(rows * width * 4, 16),
                    usage=usage.STORAGE | usage.COPY_SRC | usage.COPY_DST))
        self._slice_bytes = [spec.page_size * w * 4 for w in self.widths]
        self._page_bytes = sum(self._slice_bytes) * spec.n_layers
        self._staging = None
        self._scratch = gpu.device.create_buffer(size=max(self._slice_bytes), usage=usage.COPY_SRC | usage.COPY_DST)

    def layer_buffers(self, layer: int) -> tuple:
        return self.buffers[2 * layer], self.buffers[2 * layer + 1]

    def _slices(self, page: int):
        for i, buf in enumerate(self.buffers):
            size = self._slice_bytes[i % 2]
            yield buf, page * size, size

    def read_page(self, page: int) -> bytes:
        usage = self.gpu.wgpu.BufferUsage
        if self._staging is None:
            self._staging = self.gpu.device.create_buffer(size=self._page_bytes, usage=usage.MAP_READ | usage.COPY_DST)
        enc = self.gpu.device.create_command_encoder()
        at = 0
        for buf, offset, size in self._slices(page):
            enc.copy_buffer_to_buffer(buf, offset, self._staging, at, size)
            at += size
        self.gpu.device.queue.submit([enc.finish()])
        self._staging.map_sync(self.gpu.wgpu.MapMode.READ)
        try:
            return bytes(self._staging.read_mapped())
        finally:
            self._staging.unmap()

    def write_page(self, page: int, data: bytes) -> None:
        if len(data) != self._page_bytes:
            raise ValueError(f"page data is {len(data)} bytes, expected {self._page_bytes}")
        view = np.frombuffer(data, np.uint8)
        at = 0
        for buf, offset, size in self._slices(page):
            self.gpu.device.queue.write_buffer(buf, offset, view[at:at + size])
            at += size

    def copy_page(self, src: int, dst: int) -> None:
        # WebGPU forbids a copy within one buffer, so each slice goes through a scratch buffer.
        enc = self.gpu.device.create_command_encoder()
        for (buf, s_off, size), (_, d_off, _) in zip(self._slices(src), self._slices(dst)):
            enc.copy_buffer_to_buffer(buf, s_off, self._scratch, 0, size)
            enc.copy_buffer_to_buffer(self._scratch, 0, buf, d_off, size)
        self.gpu.device.queue.submit([enc.finish()])
