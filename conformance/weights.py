"""Random tensors in any GGML type, built as the `TensorInfo` records a GGUF file would give.

Quantized types are random raw blocks: every bit pattern of the quants is exercised, and only
the f16 scale fields are set to small positive values so the weights stay finite and of a sane
size. This works for types `gguf.quants.quantize` cannot produce (the k-quants) as well.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES

from llamay_core.files.gguf_file import TensorInfo

# Byte offsets of the f16 scale fields (d, dmin, m) inside one block of each quantized type.
F16_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_NL": (0,), "IQ4_XS": (0,),
}
FLOAT_TYPES = ("F32", "F16", "BF16")
# The types the op grid covers when a backend claims them: what real GGUF files use.
GRID_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
              "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")


def block_size(type_name: str) -> int:
    return GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][0]


def random_tensor(name: str, type_name: str, shape: tuple[int, ...], rng: np.random.Generator,
                  scale: float = 1.0) -> TensorInfo:
    """A tensor of `shape` (numpy order, rows last) in `type_name` with seeded random contents."""
    ggml_type = GGMLQuantizationType[type_name]
    if type_name in FLOAT_TYPES:
        values = (rng.standard_normal(shape) * scale).astype(np.float32)
        if type_name == "F16":
            data = values.astype(np.float16)
        elif type_name == "BF16":
            data = (values.view(np.uint32) >> 16).astype(np.uint16)
        else:
            data = values
        return TensorInfo(name=name, ggml_type=ggml_type, shape=tuple(shape), data=data)
    block, type_size = GGML_QUANT_SIZES[ggml_type]
    if shape[-1] % block:
        raise ValueError(f"{type_name} rows must be a multiple of {block}, got {shape[-1]}")
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    n_blocks = rows * shape[-1] // block
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset in F16_FIELDS[type_name]:
        d = (rng.uniform(0.5, 1.5, n_blocks) * scale / 64).astype(np.float16)
        raw[:, offset:offset + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return TensorInfo(name=name, ggml_type=ggml_type, shape=tuple(shape), data=raw.reshape(rows, -1))


def f32_tensor(name: str, values: np.ndarray) -> TensorInfo:
    """An F32 tensor holding exactly `values` (activation tables, norm weights, identity...)."""
    values = np.ascontiguousarray(values, np.float32)
    return TensorInfo(name=name, ggml_type=GGMLQuantizationType.F32, shape=tuple(values.shape), data=values)
