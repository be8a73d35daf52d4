"""GGML weight formats the cpu kernels read, keyed by the GGML type integer.

The codes are the values of `gguf.GGMLQuantizationType`, written out as plain ints so
Numba code can branch on them as compile-time constants.
"""

from __future__ import annotations

F32 = 0
F16 = 1
Q4_0 = 2
Q4_1 = 3
Q5_0 = 6
Q5_1 = 7
Q8_0 = 8
Q2_K = 10
Q3_K = 11
Q4_K = 12
Q5_K = 13
Q6_K = 14
BF16 = 30

# name -> GGML type code, for every format the kernels implement.
TYPE_CODE: dict[str, int] = {
    "F32": F32,
    "F16": F16,
    "BF16": BF16,
    "Q4_0": Q4_0,
    "Q4_1": Q4_1,
    "Q5_0": Q5_0,
    "Q5_1": Q5_1,
    "Q8_0": Q8_0,
    "Q2_K": Q2_K,
    "Q3_K": Q3_K,
    "Q4_K": Q4_K,
    "Q5_K": Q5_K,
    "Q6_K": Q6_K,
}
TYPE_NAME: dict[int, str] = {v: k for k, v in TYPE_CODE.items()}
SUPPORTED_TYPES: frozenset[int] = frozenset(TYPE_CODE.values())
# The block-quantized formats (every kernel family handles all of them) and, among them, the
# K-quants (256-quant super-blocks of eight 32-quant runs).
QUANTIZED: tuple[int, ...] = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
K_QUANTS: tuple[int, ...] = (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)

# code -> (elements per block, bytes per block), as gguf.constants.GGML_QUANT_SIZES.
BLOCK: dict[int, tuple[int, int]] = {
    F32: (1, 4),
    F16: (1, 2),
    BF16: (1, 2),
    Q4_0: (32, 18),
    Q4_1: (32, 20),
    Q5_0: (32, 22),
    Q5_1: (32, 24),
    Q8_0: (32, 34),
    Q2_K: (256, 84),
    Q3_K: (256, 110),
    Q4_K: (256, 144),
    Q5_K: (256, 176),
    Q6_K: (256, 210),
}


def type_code(t) -> int:
    """The GGML type code for `t`: an int, a name like "Q4_K", or a gguf.GGMLQuantizationType."""
    if isinstance(t, str):
        try:
            return TYPE_CODE[t.upper()]
        except KeyError:
            raise ValueError(f"unsupported weight type {t!r}") from None
    code = int(t)
    if code not in SUPPORTED_TYPES:
        raise ValueError(f"unsupported weight type code {code}")
    return code


def row_bytes(code: int, cols: int) -> int:
    """Bytes one row of `cols` elements takes in format `code`."""
    elems, nbytes = BLOCK[type_code(code)]
    if cols % elems:
        raise ValueError(f"{TYPE_NAME[code]} rows need a multiple of {elems} elements, got {cols}")
    return cols // elems * nbytes


def row_elems(code: int, nbytes: int) -> int:
    """Elements in one row of `nbytes` bytes in format `code`."""
    elems, bsize = BLOCK[type_code(code)]
    if nbytes % bsize:
        raise ValueError(f"{TYPE_NAME[code]} rows need a multiple of {bsize} bytes, got {nbytes}")
    return nbytes // bsize * elems
