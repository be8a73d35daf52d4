"""One 32-weight run of a row, dequantized into two f32x16 registers, for every GGML format.

`run_*(wr, k)` returns the k-th 32 dequantized weights of row `wr` (layouts as in `_rows.py`);
`run(code, wr, k)` picks the format. The grouped kernels (`_grouped.py`) call them once per run
for a whole group of tokens. No fast-math flags: the bits must be the same in every caller.
"""

from __future__ import annotations

import numpy as np
from numba import literally, njit

from . import formats as F
from ._rows import _i8, _k3_scale, _k4_scale_min
from ._simd import (
    ld_f16,
    vbits32,
    vld_bf16,
    vld_f16,
    vld_f32b,
    vor,
    vq,
    vq8,
    vshl,
    vsubk,
    xaffine,
    xscale,
)

# No fastmath here, on purpose: see the module docstring.
_exact = njit(cache=True, nogil=True)

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
def _k4_affine(wr, o, j):
    # Q4_K/Q5_K super-block at o: weight = d*sc_j*q - dmin*mn_j, as (scale, offset) of sub-block j
    sc, mn = _k4_scale_min(wr, o + 4, j)
    return ld_f16(wr, o) * np.float32(sc), -(ld_f16(wr, o + 2) * np.float32(mn))


@_exact
def run_q4_k(wr, k):
    o = (k >> 3) * 144
    j = k & 7
    s, b = _k4_affine(wr, o, j)
    qo = o + 16 + (j >> 1) * 32
    shift = 4 * (j & 1)
    return xaffine(vq(wr, qo, shift, 15), s, b), xaffine(vq(wr, qo + 16, shift, 15), s, b)


@_exact
def run_q5_k(wr, k):
    o = (k >> 3) * 176
    j = k & 7
    s, b = _k4_affine(wr, o, j)
    qo = o + 48 + (j >> 1) * 32
    shift = 4 * (j & 1)
    q0 = vor(vq(wr, qo, shift, 15), vshl(vq(wr, o + 16, j, 1), 4))
    q1 = vor(vq(wr, qo + 16, shift, 15), vshl(vq(wr, o + 32, j, 1), 4))
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
    """The k-th 32 dequantized weights of row wr in format `code`.

    `code` must be a compile-time literal (callers say `literally(code)`), so Numba prunes the
    other branches; a runtime branch here halves the kernels' speed, and passing the per-format
    function as an argument instead would defeat Numba's disk cache.
    """
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


