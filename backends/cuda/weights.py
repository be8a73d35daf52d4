"""Weights on the device, uploaded once in their GGML block formats.

A matrix keeps its file bytes ([rows, row_bytes] uint8): kernels dequantize groups of eight values
as they read them, so no f32 copy of a quantized matrix ever exists. Vectors (norm weights,
biases) are small and are stored as float32, which is what the kernels read them as.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs
import numpy as np
from gguf.quants import dequantize

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import TensorInfo
from llamay_backends.cuda import formats


@attrs.frozen
class DeviceTensor:
    name: str
    type_name: str  # GGML type of `data`: the file's type for matrices, "F32" for vectors
    shape: tuple[int, ...]
    row_bytes: int
    data: Any = attrs.field(eq=False, repr=False)  # device array

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2


class DeviceWeights:
    """Every tensor a graph reads, on the device; `nbytes` is what the upload cost."""

    def __init__(self, tensors: Mapping[str, TensorInfo], xp: Any) -> None:
        self.tensors: dict[str, DeviceTensor] = {}
        for name, t in tensors.items():
            self.tensors[name] = upload(t, xp)

    def __getitem__(self, name: str) -> DeviceTensor:
        return self.tensors[name]

    @property
    def nbytes(self) -> int:
        return sum(int(t.data.nbytes) for t in self.tensors.values())


def upload(t: TensorInfo, xp: Any) -> DeviceTensor:
    shape = tuple(int(s) for s in t.shape)
    if len(shape) == 1:
        host = dequantize(t.raw_rows(), t.ggml_type).astype(np.float32).reshape(-1)
        return DeviceTensor(t.name, "F32", shape, 4 * shape[0], xp.asarray(host))
    if len(shape) != 2:
        raise ModelFileError(f"tensor {t.name}", f"the cuda backend reads vectors and matrices, not shape {list(shape)}")
    if t.type_name not in formats.WEIGHT_TYPES:
        raise ModelFileError(f"tensor {t.name}", f"the cuda backend does not read {t.type_name} "
                                     f"(it reads {', '.join(sorted(formats.WEIGHT_TYPES))})")
    if formats.stored_width(t.type_name, shape[1]) % formats.GROUP:
        raise ModelFileError(f"tensor {t.name}", f"row of {shape[1]} values is not a multiple of {formats.GROUP}")
    raw = np.ascontiguousarray(t.raw_rows())
    expected = formats.row_bytes(t.type_name, shape[1])
    if t.type_name in formats.FLOAT_TYPES and raw.shape[1] < expected:  # a float table of any width
        raw = np.pad(raw, ((0, 0), (0, expected - raw.shape[1])))
    if raw.shape != (shape[0], expected):
        raise ModelFileError(f"tensor {t.name}", f"{t.type_name} data is {list(raw.shape)} bytes, expected {[shape[0], expected]}")
    return DeviceTensor(t.name, t.type_name, shape, expected, xp.asarray(raw))
