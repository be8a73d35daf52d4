"""Numba kernels that compute with GGML block-format weights in place.

A weight matrix is passed as uint8[rows, row_bytes]: its rows of blocks exactly as they
sit in the GGUF file (`raw_rows` makes that view). Decode never builds a float copy of
a quantized weight: each kernel unpacks 16 quants at a time into SIMD registers and
multiplies them with x there.

Public surface:
    matvec(code, w, x, out)             decode, out = W @ x (fastest strategy per format)
    matvec_float / matvec_q8            decode with float / int8 activations, explicitly
    uses_q8(code)                       which of the two `matvec` runs on this CPU
    matmul(code, w, X, OUT)             prefill, OUT = X @ W.T (dequantized tiles + BLAS)
    matmul_grouped(code, w, X, OUT)     a few tokens at once, each bit-identical to alone
    decode_call(code, w, packed, cols, int8)   a weight's few-row kernel, chosen once; callable
                                        from Python, and from compiled code as `decode_matmul`
    interleave(code, w) + interleaved_kernel(code, wp, cols)   the same with int8 activations on
                                        rows interleaved eight at a time (`interleaved.py`);
                                        prompts too for the formats in INT8_PREFILL
    matmul_fused / matmul_q8            measured alternative prefill strategies
    q8_roundtrip(X, OUT)                X as the int8 scheme sees it (quantized, scaled back)
    dequantize_rows(code, w, ids, out)  embedding lookup, rows to float32
    dequantize_range(code, w, r0, r1, out)
    prepare_x + dot_rows, prepare_x_q8 + qdot_rows, deq_row   serial blocks for Numba callers
    type_code, row_bytes, row_elems, raw_rows, SUPPORTED_TYPES, TYPE_CODE, TYPE_NAME
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llamay_backends.cpu import isa
from llamay_backends.cpu.numba_cache import drop_stale

isa.apply()  # before anything below makes Numba create its target machine
# and before any cached function loads: a cached caller carries its callees' old machine code
drop_stale(Path(__file__).resolve().parent.parent)

from .formats import (  # noqa: E402
    BF16,
    F16,
    F32,
    Q2_K,
    Q3_K,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
    SUPPORTED_TYPES,
    TYPE_CODE,
    TYPE_NAME,
    row_bytes,
    row_elems,
    type_code,
)
from ._api import (  # noqa: E402
    SERIAL_BYTES,
    SMALL_T,
    TILE_BYTES,
    TILE_ROWS,
    check_row_ids,
    dequantize_range,
    dequantize_rows,
    matmul,
    matmul_fused,
    grouped_kernel,
    matmul_grouped,
    matmul_q8,
    matvec,
    matvec_float,
    matvec_q8,
    prepare_x,
    q8_roundtrip,
    prepare_x_q8,
    uses_q8,
)
from ._interleaved import interleaved_kernel, read_only  # noqa: E402
from ._decode_call import (INTERLEAVED, MULTI, DecodeCall, decode_call, decode_matmul,  # noqa: E402
                           decode_matmul_multi, empty_weight, formats_key, interleaved_multi, team_matmul)
from .interleaved import can_pack as can_interleave  # noqa: E402
from .interleaved import pack as interleave  # noqa: E402
from .interleaved import INT8_PREFILL  # noqa: E402
from ._q8 import qdot_rows, quantize_q8  # noqa: E402
from ._rows import XA_ROWS, deq_row, dot_rows, x_sums  # noqa: E402
from ._simd import FEATURES, HAS_AVX2, HAS_F16C, HAS_VNNI  # noqa: E402


def raw_rows(data: np.ndarray, code: int, rows: int | None = None) -> np.ndarray:
    """View tensor data (any dtype, C-contiguous) as the uint8[rows, row_bytes] the kernels take.

    `rows` defaults to the leading dimension of `data`; a 1-D byte buffer needs it given.
    No copy is made.
    """
    raw = np.ascontiguousarray(data).view(np.uint8)
    if rows is None:
        rows = data.shape[0] if data.ndim > 1 else 1
    raw = raw.reshape(rows, -1)
    row_elems(code, raw.shape[1])  # validates the row length for the format
    return raw


__all__ = [
    "BF16", "F16", "F32", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0",
    "SUPPORTED_TYPES", "TYPE_CODE", "TYPE_NAME", "type_code", "row_bytes", "row_elems", "raw_rows",
    "matvec", "matvec_float", "matvec_q8", "uses_q8", "FEATURES", "HAS_AVX2", "HAS_F16C", "HAS_VNNI",
    "matmul", "matmul_fused", "matmul_q8", "q8_roundtrip", "grouped_kernel", "matmul_grouped", "dequantize_rows", "dequantize_range",
    "check_row_ids",
    "interleaved_kernel", "can_interleave", "interleave", "INT8_PREFILL",
    "DecodeCall", "decode_call", "decode_matmul", "decode_matmul_multi", "interleaved_multi", "empty_weight", "formats_key",
    "team_matmul",
    "INTERLEAVED", "MULTI", "read_only",
    "prepare_x", "prepare_x_q8", "x_sums", "dot_rows", "quantize_q8", "qdot_rows", "deq_row",
    "SERIAL_BYTES", "SMALL_T", "TILE_BYTES", "TILE_ROWS", "XA_ROWS",
]
