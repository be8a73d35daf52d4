"""Grouped decode kernels: one pass over a weight row serves up to 8 tokens, bit-exactly.

Why: a continuous-batching step or a speculative verification multiplies a handful of tokens by
every weight. The per-token fused kernels (`_rows.py`) unpack each block again for every token,
so such a step costs the sum of its tokens' matvecs. Here each 32-quant run of a row is
dequantized once into two f32x16 registers (`run_*`), and every token of the group accumulates
from them.

The contract that makes this usable for serving: a token's result does not depend on the group
it was computed in. Every token keeps its own pair of accumulators (lanes 0-15 and 16-31 of each
run), the arithmetic is the same sequence of `llvm.fma` calls and additions in every group size,
and these kernels carry no fast-math flags, so LLVM may not reassociate them differently when it
inlines them into the 1-, 2-, 4- or 8-token loop. Tests check the bitwise identity for every
format and grouping.

`run_*(wr, k)` returns the k-th 32 dequantized weights of row `wr` (layouts as in `_rows.py`).
"""

from __future__ import annotations

import numpy as np
from numba import literally, njit

from . import formats as F
from ._rows import _i8, _k3_scale, _k4_scale_min
from ._simd import (
    PREFETCH_BYTES,
    ld_f16,
    prefetch,
    vbits32,
    vld_bf16,
    vld_f16,
    vld_f32b,
    vor,
    vq,
    vq8,
    vshl,
    vsubk,
    vzero,
    xadd,
    xaffine,
    xfma,
    xhsum,
    xscale,
)

# No fastmath here, on purpose: see the module docstring.
_exact = njit(cache=True, nogil=True)

# Most tokens one pass over a row serves (AVX-512 holds 16 accumulators and the run in its
# 32 registers; larger groups spill).
GROUP_MAX = 8


# ----------------------------------------------------------------- one 32-weight run per format


@_exact
def run_q4_0(wr, k):
    o = k * 18
    d = ld_f16(wr, o)
    return xscale(vsubk(vq(wr, o + 2, 0, 15), 8), d), xscale(vsubk(vq(wr, o + 2, 4, 15), 8), d)


@_exact
def run_q4_1(wr, k):
    o = k * 20
    d = ld_f16(wr, o)
    m = ld_f16(wr, o + 2)
    return xaffine(vq(wr, o + 4, 0, 15), d, m), xaffine(vq(wr, o + 4, 4, 15), d, m)


@_exact
def run_q5_0(wr, k):
    o = k * 22
    d = ld_f16(wr, o)
    lo = vsubk(vor(vq(wr, o + 6, 0, 15), vbits32(wr, o + 2, 0, 4)), 16)
    hi = vsubk(vor(vq(wr, o + 6, 4, 15), vbits32(wr, o + 2, 16, 4)), 16)
    return xscale(lo, d), xscale(hi, d)


@_exact
def run_q5_1(wr, k):
    o = k * 24
    d = ld_f16(wr, o)
    m = ld_f16(wr, o + 2)
    lo = vor(vq(wr, o + 8, 0, 15), vbits32(wr, o + 4, 0, 4))
    hi = vor(vq(wr, o + 8, 4, 15), vbits32(wr, o + 4, 16, 4))
    return xaffine(lo, d, m), xaffine(hi, d, m)


@_exact
def run_q8_0(wr, k):
    o = k * 34
    d = ld_f16(wr, o)
    return xscale(vq8(wr, o + 2), d), xscale(vq8(wr, o + 18), d)


@_exact
def run_q2_k(wr, k):
    # run k = 16-quant groups g, g+1 of super-block k // 8 (see dot_q2_k)
    o = (k >> 3) * 84
    g = 2 * (k & 7)
    h = g >> 3
    s = (g >> 1) & 3
    d = ld_f16(wr, o + 80)
    dmin = ld_f16(wr, o + 82)
    sc0 = np.int32(wr[o + g])
    sc1 = np.int32(wr[o + g + 1])
    v0 = xaffine(vq(wr, o + 16 + h * 32, 2 * s, 3), d * np.float32(sc0 & 15), -(dmin * np.float32(sc0 >> 4)))
    v1 = xaffine(vq(wr, o + 32 + h * 32, 2 * s, 3), d * np.float32(sc1 & 15), -(dmin * np.float32(sc1 >> 4)))
    return v0, v1


@_exact
def run_q3_k(wr, k):
    o = (k >> 3) * 110
    g = 2 * (k & 7)
    h = g >> 3
    s = (g >> 1) & 3
    hb = h * 4 + s
    d = ld_f16(wr, o + 108)
    q0 = vsubk(vor(vq(wr, o + 32 + h * 32, 2 * s, 3), vshl(vq(wr, o, hb, 1), 2)), 4)
    q1 = vsubk(vor(vq(wr, o + 48 + h * 32, 2 * s, 3), vshl(vq(wr, o + 16, hb, 1), 2)), 4)
    return xscale(q0, d * np.float32(_k3_scale(wr, o + 96, g))), xscale(q1, d * np.float32(_k3_scale(wr, o + 96, g + 1)))


@_exact
def run_q4_k(wr, k):
    o = (k >> 3) * 144
    j = k & 7
    d = ld_f16(wr, o)
    dmin = ld_f16(wr, o + 2)
    sc, mn = _k4_scale_min(wr, o + 4, j)
    qo = o + 16 + (j >> 1) * 32
    shift = 4 * (j & 1)
    s = d * np.float32(sc)
    b = -(dmin * np.float32(mn))
    return xaffine(vq(wr, qo, shift, 15), s, b), xaffine(vq(wr, qo + 16, shift, 15), s, b)


@_exact
def run_q5_k(wr, k):
    o = (k >> 3) * 176
    j = k & 7
    d = ld_f16(wr, o)
    dmin = ld_f16(wr, o + 2)
    sc, mn = _k4_scale_min(wr, o + 4, j)
    qo = o + 48 + (j >> 1) * 32
    shift = 4 * (j & 1)
    q0 = vor(vq(wr, qo, shift, 15), vshl(vq(wr, o + 16, j, 1), 4))
    q1 = vor(vq(wr, qo + 16, shift, 15), vshl(vq(wr, o + 32, j, 1), 4))
    s = d * np.float32(sc)
    b = -(dmin * np.float32(mn))
    return xaffine(q0, s, b), xaffine(q1, s, b)


@_exact
def run_q6_k(wr, k):
    o = (k >> 3) * 210
    g = 2 * (k & 7)
    h = g >> 3
    c = g & 7
    lo = o + h * 64 + (c & 3) * 16
    hi = o + 128 + h * 32
    shift = 4 * (c >> 2)
    s = c >> 1
    d = ld_f16(wr, o + 208)
    q0 = vsubk(vor(vq(wr, lo, shift, 15), vshl(vq(wr, hi, 2 * s, 3), 4)), 32)
    q1 = vsubk(vor(vq(wr, lo + 16, shift, 15), vshl(vq(wr, hi + 16, 2 * s, 3), 4)), 32)
    return xscale(q0, d * np.float32(_i8(wr[o + 192 + g]))), xscale(q1, d * np.float32(_i8(wr[o + 193 + g])))


@_exact
def run_f32(wr, k):
    return vld_f32b(wr, k * 128), vld_f32b(wr, k * 128 + 64)


@_exact
def run_f16(wr, k):
    return vld_f16(wr, k * 64), vld_f16(wr, k * 64 + 32)


@_exact
def run_bf16(wr, k):
    return vld_bf16(wr, k * 64), vld_bf16(wr, k * 64 + 32)


@_exact
def run(code, wr, k):
    literally(code)
    """The k-th 32 dequantized weights of row wr in format `code` (the branch is loop-invariant
    and predicted; passing the per-format function instead would defeat Numba's disk cache)."""
    if code == F.Q4_1:
        return run_q4_1(wr, k)
    if code == F.Q8_0:
        return run_q8_0(wr, k)
    if code == F.Q5_0:
        return run_q5_0(wr, k)
    if code == F.Q6_K:
        return run_q6_k(wr, k)
    if code == F.Q4_K:
        return run_q4_k(wr, k)
    if code == F.Q4_0:
        return run_q4_0(wr, k)
    if code == F.Q5_1:
        return run_q5_1(wr, k)
    if code == F.Q5_K:
        return run_q5_k(wr, k)
    if code == F.Q2_K:
        return run_q2_k(wr, k)
    if code == F.Q3_K:
        return run_q3_k(wr, k)
    if code == F.F16:
        return run_f16(wr, k)
    if code == F.BF16:
        return run_bf16(wr, k)
    return run_f32(wr, k)


# ----------------------------------------------------------------- rows x groups of tokens
# Each loop below computes, for every token i of its group, out = hsum(a_i + b_i) where a_i
# and b_i accumulate fma(run, x_i) over the row's runs: the same per-token sequence in all four.


@_exact
def _prefetch_row(wr):
    for off in range(0, wr.shape[0], 64):
        prefetch(wr, off + PREFETCH_BYTES)


@_exact
def rows_1(code, w, X, t, OUT, r0, r1):
    literally(code)
    x0 = X[t]
    n = X.shape[1] // 32
    for r in range(r0, r1):
        wr = w[r]
        _prefetch_row(wr)
        a0 = vzero()
        b0 = vzero()
        for k in range(n):
            v0, v1 = run(code, wr, k)
            e = k * 32
            a0 = xfma(a0, v0, x0, e)
            b0 = xfma(b0, v1, x0, e + 16)
        OUT[t, r] = xhsum(xadd(a0, b0))


@_exact
def rows_2(code, w, X, t, OUT, r0, r1):
    literally(code)
    x0 = X[t]
    x1 = X[t + 1]
    n = X.shape[1] // 32
    for r in range(r0, r1):
        wr = w[r]
        _prefetch_row(wr)
        a0 = vzero()
        b0 = vzero()
        a1 = vzero()
        b1 = vzero()
        for k in range(n):
            v0, v1 = run(code, wr, k)
            e = k * 32
            a0 = xfma(a0, v0, x0, e)
            b0 = xfma(b0, v1, x0, e + 16)
            a1 = xfma(a1, v0, x1, e)
            b1 = xfma(b1, v1, x1, e + 16)
        OUT[t, r] = xhsum(xadd(a0, b0))
        OUT[t + 1, r] = xhsum(xadd(a1, b1))


@_exact
def rows_4(code, w, X, t, OUT, r0, r1):
    literally(code)
    x0 = X[t]
    x1 = X[t + 1]
    x2 = X[t + 2]
    x3 = X[t + 3]
    n = X.shape[1] // 32
    for r in range(r0, r1):
        wr = w[r]
        _prefetch_row(wr)
        a0 = vzero()
        b0 = vzero()
        a1 = vzero()
        b1 = vzero()
        a2 = vzero()
        b2 = vzero()
        a3 = vzero()
        b3 = vzero()
        for k in range(n):
            v0, v1 = run(code, wr, k)
            e = k * 32
            a0 = xfma(a0, v0, x0, e)
            b0 = xfma(b0, v1, x0, e + 16)
            a1 = xfma(a1, v0, x1, e)
            b1 = xfma(b1, v1, x1, e + 16)
            a2 = xfma(a2, v0, x2, e)
            b2 = xfma(b2, v1, x2, e + 16)
            a3 = xfma(a3, v0, x3, e)
            b3 = xfma(b3, v1, x3, e + 16)
        OUT[t, r] = xhsum(xadd(a0, b0))
        OUT[t + 1, r] = xhsum(xadd(a1, b1))
        OUT[t + 2, r] = xhsum(xadd(a2, b2))
        OUT[t + 3, r] = xhsum(xadd(a3, b3))


@_exact
def rows_8(code, w, X, t, OUT, r0, r1):
    literally(code)
    x0 = X[t]
    x1 = X[t + 1]
    x2 = X[t + 2]
    x3 = X[t + 3]
    x4 = X[t + 4]
    x5 = X[t + 5]
    x6 = X[t + 6]
    x7 = X[t + 7]
    n = X.shape[1] // 32
    for r in range(r0, r1):
        wr = w[r]
        _prefetch_row(wr)
        a0 = vzero()
        b0 = vzero()
        a1 = vzero()
        b1 = vzero()
        a2 = vzero()
        b2 = vzero()
        a3 = vzero()
        b3 = vzero()
        a4 = vzero()
        b4 = vzero()
        a5 = vzero()
        b5 = vzero()
        a6 = vzero()
        b6 = vzero()
        a7 = vzero()
        b7 = vzero()
        for k in range(n):
            v0, v1 = run(code, wr, k)
            e = k * 32
            a0 = xfma(a0, v0, x0, e)
            b0 = xfma(b0, v1, x0, e + 16)
            a1 = xfma(a1, v0, x1, e)
            b1 = xfma(b1, v1, x1, e + 16)
            a2 = xfma(a2, v0, x2, e)
            b2 = xfma(b2, v1, x2, e + 16)
            a3 = xfma(a3, v0, x3, e)
            b3 = xfma(b3, v1, x3, e + 16)
            a4 = xfma(a4, v0, x4, e)
            b4 = xfma(b4, v1, x4, e + 16)
            a5 = xfma(a5, v0, x5, e)
            b5 = xfma(b5, v1, x5, e + 16)
            a6 = xfma(a6, v0, x6, e)
            b6 = xfma(b6, v1, x6, e + 16)
            a7 = xfma(a7, v0, x7, e)
            b7 = xfma(b7, v1, x7, e + 16)
        OUT[t, r] = xhsum(xadd(a0, b0))
        OUT[t + 1, r] = xhsum(xadd(a1, b1))
        OUT[t + 2, r] = xhsum(xadd(a2, b2))
        OUT[t + 3, r] = xhsum(xadd(a3, b3))
        OUT[t + 4, r] = xhsum(xadd(a4, b4))
        OUT[t + 5, r] = xhsum(xadd(a5, b5))
        OUT[t + 6, r] = xhsum(xadd(a6, b6))
        OUT[t + 7, r] = xhsum(xadd(a7, b7))


@_exact
def _tokens(code, w, X, OUT, r0, r1, group_max):
    literally(code)
    # largest groups first; any split gives each token the same bits
    T = X.shape[0]
    t = 0
    if group_max >= 8:
        while T - t >= 8:
            rows_8(code, w, X, t, OUT, r0, r1)
            t += 8
    while T - t >= 4:
        rows_4(code, w, X, t, OUT, r0, r1)
        t += 4
    if T - t >= 2:
        rows_2(code, w, X, t, OUT, r0, r1)
        t += 2
    if T - t >= 1:
        rows_1(code, w, X, t, OUT, r0, r1)


@_exact
def grouped_rows(code, w, X, OUT, r0, r1, group_max):
    """OUT[t, r] = w[r] . X[t] for r in [r0, r1) and every token t (serial; callers parallelize).

    Requires `has_grouped(code, cols)`. group_max (1, 2, 4 or 8) caps the tokens per pass.
    """
    if code == F.Q4_1:
        _tokens(3, w, X, OUT, r0, r1, group_max)
    elif code == F.Q8_0:
        _tokens(8, w, X, OUT, r0, r1, group_max)
    elif code == F.Q5_0:
        _tokens(6, w, X, OUT, r0, r1, group_max)
    elif code == F.Q6_K:
        _tokens(14, w, X, OUT, r0, r1, group_max)
    elif code == F.Q4_K:
        _tokens(12, w, X, OUT, r0, r1, group_max)
    elif code == F.Q4_0:
        _tokens(2, w, X, OUT, r0, r1, group_max)
    elif code == F.Q5_1:
        _tokens(7, w, X, OUT, r0, r1, group_max)
    elif code == F.Q5_K:
        _tokens(13, w, X, OUT, r0, r1, group_max)
    elif code == F.Q2_K:
        _tokens(10, w, X, OUT, r0, r1, group_max)
    elif code == F.Q3_K:
        _tokens(11, w, X, OUT, r0, r1, group_max)
    elif code == F.F16:
        _tokens(1, w, X, OUT, r0, r1, group_max)
    elif code == F.BF16:
        _tokens(30, w, X, OUT, r0, r1, group_max)
    elif code == F.F32:
        _tokens(0, w, X, OUT, r0, r1, group_max)


@_exact
def has_grouped(code, cols):
    """Whether `grouped_rows` handles weights of format `code` with `cols` columns."""
    if code == F.F32 or code == F.F16 or code == F.BF16:
        return cols % 32 == 0
    return F.Q4_0 <= code <= F.Q6_K and code != 4 and code != 5 and code != 9
