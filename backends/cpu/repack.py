"""Weights in formats the kernels do not read, rewritten at load time into ones they do, exactly.

IQ4_NL and MXFP4 blocks are 32 indices into a 16-entry int8 table times one scale per block:
the same numbers as a Q8_0 block whose int8 quants are the table entries (an MXFP4 scale is a
power of two, which f16 holds exactly between 2^-24 and 2^15; a tensor with a scale outside
that goes to F32). IQ4_XS scales each 32 by d * (6-bit scale), which f16 cannot always hold:
it becomes F32, exact at eight times the memory. Every path equals `gguf.quants.dequantize`.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from llamay_core.files.gguf_file import TensorInfo

IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
REPACKED_TYPES = frozenset({"IQ4_NL", "IQ4_XS", "MXFP4"})
Q8_0_BLOCK = 34


def _nibbles_to_q8(scales_f16: np.ndarray, nibbles: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Q8_0 blocks from per-block f16 scales and 16 bytes of 4-bit indices (low half first)."""
    n = nibbles.shape[0]
    qs = np.concatenate([table[nibbles & 0x0F], table[nibbles >> 4]], axis=1)  # element j, then j + 16
    out = np.empty((n, Q8_0_BLOCK), np.uint8)
    out[:, :2] = scales_f16.astype(np.float16).view(np.uint8).reshape(n, 2)
    out[:, 2:] = qs.view(np.uint8)
    return out


def _as_f32(t: TensorInfo) -> TensorInfo:
    values = dequantize(t.raw_rows(), t.ggml_type).astype(np.float32).reshape(t.shape)
    return TensorInfo(name=t.name, ggml_type=GGMLQuantizationType.F32, shape=t.shape, data=values)


def _as_q8_0(t: TensorInfo, blocks: np.ndarray, scales: np.ndarray, table: np.ndarray) -> TensorInfo:
    rows = t.raw_rows().shape[0]
    q8 = _nibbles_to_q8(scales, blocks[:, -16:], table).reshape(rows, -1)
    return TensorInfo(name=t.name, ggml_type=GGMLQuantizationType.Q8_0, shape=t.shape, data=q8)


def repack(t: TensorInfo) -> TensorInfo:
    """`t` in a format the kernels read, holding exactly the values gguf.quants dequantizes."""
    if t.type_name not in REPACKED_TYPES or len(t.shape) == 1:
        return t
    if t.type_name == "IQ4_XS":
        return _as_f32(t)
    block_bytes = 18 if t.type_name == "IQ4_NL" else 17
    blocks = t.raw_rows().reshape(-1, block_bytes)
    if t.type_name == "IQ4_NL":
        return _as_q8_0(t, blocks, blocks[:, :2].copy().view(np.float16).reshape(-1), IQ4_NL_VALUES)
    exponent = blocks[:, 0].astype(np.int32) - 128  # an MXFP4 block scales by 2^(e - 128)
    if exponent.min() < -24 or exponent.max() > 15:
        return _as_f32(t)
    return _as_q8_0(t, blocks, np.ldexp(np.float32(1.0), exponent), MXFP4_VALUES)
