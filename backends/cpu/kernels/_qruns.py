"""One 32-quant run of a row as unsigned bytes, and one token's int8 step over it.

The grouped int8 decode kernels (`_grouped_q8.py`) unpack run k of a weight row once,
`qrun(code, wr, k) -> (q, u, s0, s1, m0, m1)`, and every token of the group adds it in with
`qstep`. The run's weights are s0 * q (quants 0-15) and s1 * q (16-31) plus the offsets m0, m1
(a block minimum, or the zero point of a signed format: Q4_0's q-8 is q' = q, m = -8d), so a
token's contribution is

    dx * (s0 * dot(q[:16], xq[:16]) + s1 * dot(q[16:], xq[16:])) + m0 * c16[0] + m1 * c16[1]

with dx, c16 from `quantize_q8` (for formats with one scale per 32, s0 = s1, m0 = m1 and the
per-32 sum XC32 is used). Q8_0's quants are signed: q is the raw bytes and u = |q| (`qfmas`).

The scheme is the one the per-row kernels in `_q8.py` compute (tests/unit/test_cpu_q8_scheme.py
checks both against NumPy). No fast-math here: a token's bits must not depend on its group.
"""

from __future__ import annotations

import numpy as np
from numba import literally, njit

from . import formats as F
from ._rows import XC16, XC32, XD, _i8, _k3_scale, _k4_scale_min
from ._simd import b_abs, b_bitsel, b_crumbs, b_hbits16, b_load, b_nib, b_or, b_shl, ld_f16, qfma, qfmas

_exact = njit(cache=True, nogil=True)

_ZERO = np.float32(0.0)


@_exact
def qrun_q4_0(wr, k):
    o = k * 18
    d = ld_f16(wr, o)
    q = b_nib(wr, o + 2)
    m = np.float32(-8.0) * d
    return q, q, d, d, m, m


@_exact
def qrun_q4_1(wr, k):
    o = k * 20
    d = ld_f16(wr, o)
    m = ld_f16(wr, o + 2)
    q = b_nib(wr, o + 4)
    return q, q, d, d, m, m


@_exact
def qrun_q5_0(wr, k):
    o = k * 22
    d = ld_f16(wr, o)
    q = b_or(b_nib(wr, o + 6), b_hbits16(wr, o + 2))
    m = np.float32(-16.0) * d
    return q, q, d, d, m, m


@_exact
def qrun_q5_1(wr, k):
    o = k * 24
    d = ld_f16(wr, o)
    m = ld_f16(wr, o + 2)
    q = b_or(b_nib(wr, o + 8), b_hbits16(wr, o + 4))
    return q, q, d, d, m, m


@_exact
def qrun_q8_0(wr, k):
    o = k * 34
    d = ld_f16(wr, o)
    q = b_load(wr, o + 2)
    return q, b_abs(q), d, d, _ZERO, _ZERO


@_exact
def qrun_q2_k(wr, k):
    # run c = k % 8 of super-block k // 8: 2-bit plane c & 3 of bytes 16 + (c >> 2) * 32
    o = (k >> 3) * 84
    c = k & 7
    g = 2 * c
    d = ld_f16(wr, o + 80)
    dmin = ld_f16(wr, o + 82)
    sc0 = np.int32(wr[o + g])
    sc1 = np.int32(wr[o + g + 1])
    q = b_crumbs(wr, o + 16 + (c >> 2) * 32, 2 * (c & 3), 3)
    return (q, q, d * np.float32(sc0 & 15), d * np.float32(sc1 & 15),
            -(dmin * np.float32(sc0 >> 4)), -(dmin * np.float32(sc1 >> 4)))


@_exact
def qrun_q3_k(wr, k):
    # q' = low2 + 4 * hbit in 0..7, weight (q' - 4) * d * scale
    o = (k >> 3) * 110
    c = k & 7
    h = c >> 2
    s = c & 3
    g = 2 * c
    d = ld_f16(wr, o + 108)
    q = b_or(b_crumbs(wr, o + 32 + h * 32, 2 * s, 3), b_bitsel(wr, o, h * 4 + s, 4))
    s0 = d * np.float32(_k3_scale(wr, o + 96, g))
    s1 = d * np.float32(_k3_scale(wr, o + 96, g + 1))
    return q, q, s0, s1, np.float32(-4.0) * s0, np.float32(-4.0) * s1


@_exact
def qrun_q4_k(wr, k):
    o = (k >> 3) * 144
    j = k & 7
    sc, mn = _k4_scale_min(wr, o + 4, j)
    s = ld_f16(wr, o) * np.float32(sc)
    m = -(ld_f16(wr, o + 2) * np.float32(mn))
    q = b_crumbs(wr, o + 16 + (j >> 1) * 32, 4 * (j & 1), 15)
    return q, q, s, s, m, m


@_exact
def qrun_q5_k(wr, k):
    o = (k >> 3) * 176
    j = k & 7
    sc, mn = _k4_scale_min(wr, o + 4, j)
    s = ld_f16(wr, o) * np.float32(sc)
    m = -(ld_f16(wr, o + 2) * np.float32(mn))
    q = b_or(b_crumbs(wr, o + 48 + (j >> 1) * 32, 4 * (j & 1), 15), b_bitsel(wr, o + 16, j, 16))
    return q, q, s, s, m, m


@_exact
def qrun_q6_k(wr, k):
    # q' = low4 | high2 << 4 in 0..63, weight (q' - 32) * d * scale
    o = (k >> 3) * 210
    c = k & 7
    h = c >> 2
    s = c & 3
    g = 2 * c
    d = ld_f16(wr, o + 208)
    lo = b_crumbs(wr, o + h * 64 + (s & 1) * 32, 4 * (s >> 1), 15)
    q = b_or(lo, b_shl(b_crumbs(wr, o + 128 + h * 32, 2 * s, 3), 4))
    s0 = d * np.float32(_i8(wr[o + 192 + g]))
    s1 = d * np.float32(_i8(wr[o + 193 + g]))
    return q, q, s0, s1, np.float32(-32.0) * s0, np.float32(-32.0) * s1


@_exact
def qrun(code, wr, k):
    """Run k (32 quants) of row wr in format `code` (a literal): (q, u, s0, s1, m0, m1)."""
    literally(code)
    if code == F.Q4_1:
        return qrun_q4_1(wr, k)
    if code == F.Q8_0:
        return qrun_q8_0(wr, k)
    if code == F.Q5_0:
        return qrun_q5_0(wr, k)
    if code == F.Q6_K:
        return qrun_q6_k(wr, k)
    if code == F.Q4_K:
        return qrun_q4_k(wr, k)
    if code == F.Q4_0:
        return qrun_q4_0(wr, k)
    if code == F.Q5_1:
        return qrun_q5_1(wr, k)
    if code == F.Q5_K:
        return qrun_q5_k(wr, k)
    if code == F.Q2_K:
        return qrun_q2_k(wr, k)
    return qrun_q3_k(wr, k)


@_exact
def qstep(code, acc, tail, q, u, s0, s1, m0, m1, xq, xa, k):
    """One token's (acc, tail) after run k: the int8 dot into acc, the offsets into tail."""
    literally(code)
    e = k * 32
    dx = xa[XD, k]
    if code == F.Q8_0:
        return qfmas(acc, u, q, xq, e, s0 * dx), tail
    if code == F.Q2_K or code == F.Q3_K or code == F.Q6_K:
        # two 16-quant scale groups per run
        return qfma(acc, q, xq, e, s0 * dx, s1 * dx), tail + (m0 * xa[XC16, 2 * k] + m1 * xa[XC16, 2 * k + 1])
    sd = s0 * dx
    return qfma(acc, q, xq, e, sd, sd), tail + m0 * xa[XC32, k]
