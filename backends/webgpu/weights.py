"""Weights on the device: matrices in their GGML block formats (split into binding-sized chunks),
vectors (norm weights, biases) as float32."""
from __future__ import annotations

from typing import Any, Mapping

import attrs
import numpy as np
from gguf.quants import dequantize

from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import TensorInfo
from llamay_backends.webgpu.device import Gpu
from llamay_backends.webgpu.formats import LAYOUTS, SUB_BLOCK, pack_matrix


@attrs.frozen
class GpuChunk:
    """Rows [row0, row0 + n_rows) of a matrix in one storage buffer; headers start at `header_word`."""

    buffer: Any = attrs.field(repr=False)
    row0: int
    n_rows: int
    header_word: int


@attrs.frozen
class GpuMatrix:
    type_name: str
    shape: tuple[int, int]  # (rows, cols)
    chunks: tuple[GpuChunk, ...]


@attrs.frozen
class GpuVector:
    buffer: Any = attrs.field(repr=False)
    size: int


class WebGPUWeights:
    """Every tensor of the graph, uploaded once at load."""

    def __init__(self, gpu: Gpu, tensors: Mapping[str, TensorInfo], max_chunk_bytes: int) -> None:
        self.matrices: dict[str, GpuMatrix] = {}
        self.vectors: dict[str, GpuVector] = {}
        self.n_bytes = 0
        storage = gpu.wgpu.BufferUsage.STORAGE
        for name, t in tensors.items():
            if len(t.shape) == 1:
                values = t.data.reshape(-1) if t.type_name == "F32" else dequantize(t.raw_rows(), t.ggml_type)
                values = np.ascontiguousarray(values, np.float32).reshape(-1)
                buf = gpu.device.create_buffer_with_data(label=name, data=values, usage=storage)
                self.vectors[name] = GpuVector(buf, values.size)
                self.n_bytes += values.nbytes
                continue
            if t.type_name not in LAYOUTS:
                raise BackendError(f"webgpu cannot read {name}: type {t.type_name} "
                                   f"(it reads {', '.join(sorted(LAYOUTS))})")
            if len(t.shape) != 2 or (t.shape[1] % SUB_BLOCK and t.type_name not in ("F32", "F16")):
                raise BackendError(f"webgpu cannot read {name}: shape {list(t.shape)} "
                                   f"(needs a matrix whose rows are a multiple of {SUB_BLOCK})")
            raw = t.raw_rows()
            if t.shape[1] % SUB_BLOCK:  # float rows are zero-padded so kernels always read whole sub-blocks
                item = raw.shape[1] // t.shape[1]
                raw = np.pad(raw, ((0, 0), (0, (-t.shape[1] % SUB_BLOCK) * item)))
            chunks = []
            for c in pack_matrix(t.type_name, raw, max_chunk_bytes):
                buf = gpu.device.create_buffer_with_data(label=f"{name}[{c.row0}:]", data=c.words, usage=storage)
                chunks.append(GpuChunk(buf, c.row0, c.n_rows, c.header_word))
                self.n_bytes += c.words.nbytes
            self.matrices[name] = GpuMatrix(t.type_name, (t.shape[0], t.shape[1]), tuple(chunks))
