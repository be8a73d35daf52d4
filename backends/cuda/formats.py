"""The GGML weight types the CUDA kernels read in place, and the kernel-name suffix of each.

The suffixes match the instantiations of LLAMAY_FOR_EACH_FORMAT in kernels/quant.cuh.
"""
from __future__ import annotations

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

KERNEL_SUFFIX: dict[str, str] = {
    "F32": "f32", "F16": "f16", "BF16": "bf16",
    "Q4_0": "q4_0", "Q4_1": "q4_1", "Q5_0": "q5_0", "Q5_1": "q5_1", "Q8_0": "q8_0",
    "Q4_K": "q4_k", "Q5_K": "q5_k", "Q6_K": "q6_k",
}
WEIGHT_TYPES = frozenset(KERNEL_SUFFIX)
KV_SUFFIX = {"f32": "f32", "f16": "f16"}

# Every kernel reads weights in groups of eight consecutive values (quant.cuh: dequant8).
GROUP = 8
# The tensor-core prefill tile steps through K in 32s.
TILE_K = 32
FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})


def stored_width(type_name: str, k: int) -> int:
    """Values per row on the device: float rows are padded with zeros to whole groups, so that
    dequant8 never reads past a row (a quantized row is whole blocks of 32 or 256 already)."""
    return -(-k // GROUP) * GROUP if type_name in FLOAT_TYPES else k


def row_bytes(type_name: str, k: int) -> int:
    """Bytes of one row of `k` values stored as GGML type `type_name` on the device."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return stored_width(type_name, k) // block * size
