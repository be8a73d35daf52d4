"""Grouped decode kernels: one pass over a weight row serves a group of tokens, bit-exactly.

Why: a continuous-batching step or a speculative verification multiplies a handful of tokens by
every weight. The per-token fused kernels (`_rows.py`) unpack each block again for every token,
so such a step costs the sum of its tokens' matvecs. Here each 32-quant run of a row is
dequantized once into two f32x16 registers (`_runs.py`), and every token of the group
accumulates from them (`_grouped_rows.py`, generated).

The contract that makes this usable for serving: a token's result does not depend on the group
it was computed in. Every token keeps its own pair of accumulators (lanes 0-15 and 16-31 of each
run), the arithmetic is the same sequence of `llvm.fma` calls and additions for every group size,
and these kernels carry no fast-math flags, so LLVM may not reassociate them differently when it
inlines them into loops of different sizes. Tests check the bitwise identity for every format
and grouping.

With int8 activations (`grouped_q8_rows`) the same holds: a run is unpacked once into 32 bytes
(`_qruns.py`) and each token dots its own int8 activations with it (`_grouped_q8_rows.py`).
"""

from __future__ import annotations

from numba import literally, njit
from numba.core import errors, types
from numba.extending import overload

from . import formats as F
from ._grouped_q8_rows import qrows_group, qrows_group_k
from ._grouped_rows import rows_group, rows_group_k

_exact = njit(cache=True, nogil=True)

# Most tokens one pass over a row serves: the largest generated loop (`gen_grouped_rows.SIZES`).
# Each token holds two 16-lane accumulators; measured on Q4_1/Q8_0 rows, per token, AVX-512 and
# AVX2 (haswell codegen) alike: 8 or 9 tokens per pass beat 4 by 15-25%, 12 gain nothing, 16
# spill and lose. A speculative verification at lookahead 8 (9 rows) goes as 8 + 1.
GROUP_MAX = 8


@_exact
def group_size(remaining, group_max):
    """Tokens in the next pass: the largest generated loop size (8, 4, 2, 1) that fits."""
    g = 8
    while g > 1 and (g > remaining or g > group_max):
        g //= 2
    return g


def _loops(code, w, X, t, g, OUT, r0, r1):
    """The float loop for format `code` (a literal); compiled by `_loops_for`, never from Python."""
    raise NotImplementedError


def _qloops(code, w, XQ, XA, t, g, OUT, r0, r1):
    """The int8 loop for format `code` (a literal); compiled by `_qloops_for`."""
    raise NotImplementedError


def _is_kquant(code) -> bool:
    # K-quant loops are written out per super-block (gen_grouped_rows.UNROLL); choosing here, by the
    # literal, compiles only the variant a format uses (an `if` on code would compile both)
    if not isinstance(code, types.IntegerLiteral):
        raise errors.TypingError("the weight format code must be a literal")
    return code.literal_value in F.K_QUANTS


@overload(_loops, jit_options={"nogil": True})
def _loops_for(code, w, X, t, g, OUT, r0, r1):
    loop = rows_group_k if _is_kquant(code) else rows_group

    def impl(code, w, X, t, g, OUT, r0, r1):
        loop(code, w, X, t, g, OUT, r0, r1)
    return impl


@overload(_qloops, jit_options={"nogil": True})
def _qloops_for(code, w, XQ, XA, t, g, OUT, r0, r1):
    loop = qrows_group_k if _is_kquant(code) else qrows_group

    def impl(code, w, XQ, XA, t, g, OUT, r0, r1):
        loop(code, w, XQ, XA, t, g, OUT, r0, r1)
    return impl


@_exact
def grouped_rows(code, w, X, OUT, r0, r1, group_max):
    """OUT[t, r] = w[r] . X[t] for r in [r0, r1) and every token t (serial; callers parallelize).

    `code` must be a literal (each format is compiled on its first use, not all thirteen at
    once); requires `has_grouped(code, cols)`. group_max (1..8) caps the tokens per pass; passes
    take 8, 4, 2 or 1 tokens (`group_size`). Any split gives each token the same bits.
    """
    literally(code)
    T = X.shape[0]
    t = 0
    while t < T:
        g = group_size(T - t, group_max)
        _loops(code, w, X, t, g, OUT, r0, r1)
        t += g


@_exact
def grouped_q8_rows(code, w, XQ, XA, OUT, r0, r1, group_max):
    """As `grouped_rows` from int8 activations: XQ int8[T, cols] and XA float32[T, XA_ROWS,
    cols // 16] filled row by row by `quantize_q8`; quantized formats only (`has_grouped_q8`)."""
    literally(code)
    T = XQ.shape[0]
    t = 0
    while t < T:
        g = group_size(T - t, group_max)
        _qloops(code, w, XQ, XA, t, g, OUT, r0, r1)
        t += g


def has_grouped_q8(code: int) -> bool:
    """Whether `grouped_q8_rows` handles weights of format `code`."""
    return code in F.QUANTIZED


def has_grouped(code: int, cols: int) -> bool:
    """Whether `grouped_rows` handles weights of format `code` with `cols` columns."""
    if code in (F.F32, F.F16, F.BF16):
        return cols % 32 == 0
    return code in F.QUANTIZED
