"""Weights on the device: matrices kept in their GGML block bytes, split by rows where a tensor
is larger than one storage binding may be; vectors (norms, biases) as float32."""
from __future__ import annotations

from typing import Mapping

import attrs
import numpy as np
from gguf.quants import dequantize

from llamay_backends.vulkan.device import Buffer, Device
from llamay_core.files.gguf_file import TensorInfo


@attrs.define
class WeightChunk:
    """Rows [row_start, row_start + n_rows) of a matrix, in one buffer."""

    buffer: Buffer
    row_start: int
    n_rows: int
    n_bytes: int  # bound range: the chunk's bytes rounded up to whole 32-bit words


@attrs.define
class DeviceTensor:
    name: str
    type_name: str
    shape: tuple[int, ...]
    chunks: list[WeightChunk]

    @property
    def cols(self) -> int:
        return self.shape[-1]

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[:-1])) if len(self.shape) > 1 else 1


class DeviceWeights:
    """Every tensor of the graph, uploaded once when the model is loaded."""

    def __init__(self, device: Device, tensors: Mapping[str, TensorInfo]) -> None:
        self.device = device
        self.tensors: dict[str, DeviceTensor] = {}
        self.bytes = 0
        for name, info in tensors.items():
            self.tensors[name] = self._upload(info)

    def _upload(self, info: TensorInfo) -> DeviceTensor:
        if len(info.shape) == 1:
            values = dequantize(info.raw_rows(), info.ggml_type).astype(np.float32).reshape(-1)
            return DeviceTensor(info.name, "F32", info.shape, [self._chunk(values.view(np.uint8)[None, :], 0)])
        raw = info.raw_rows()
        row_bytes = raw.shape[1]
        # Rows per chunk: within one storage binding and one dispatch dimension.
        per_chunk = max(1, min(self.device.max_binding // row_bytes, self.device.max_groups))
        chunks = [self._chunk(raw[start:start + per_chunk], start) for start in range(0, raw.shape[0], per_chunk)]
        return DeviceTensor(info.name, info.type_name, tuple(info.shape), chunks)

    def _chunk(self, rows: np.ndarray, start: int) -> WeightChunk:
        data = np.ascontiguousarray(rows).reshape(-1)
        size = (data.size + 3) // 4 * 4
        buf = Buffer(self.device, size, host_visible=False)
        buf.write(data)
        self.bytes += size
        return WeightChunk(buf, start, rows.shape[0], size)

    def release(self) -> None:
        for t in self.tensors.values():
            for c in t.chunks:
                c.buffer.release()
