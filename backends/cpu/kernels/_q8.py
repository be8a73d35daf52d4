"""The q8-activation kernels: x quantized to int8 per 32 elements, integer block dots.

This is llama.cpp's scheme (q8_0 activations). Each 32-quant weight block is unpacked
into 32 unsigned bytes and dotted with the block's 32 int8 activations by a u8*s8
dot-accumulate (`_simd.vdp`: vpdpbusd with VNNI, vpmaddubsw + vpmaddwd on AVX2), then scaled by d_w * d_x in float.

Q8_0's signed quants go through the sign trick (`_simd.vdps`). Other formats whose
quants are signed (Q4_0 = q-8, Q5_0 = q-16, Q3_K = q-4, Q6_K = q-32) are dotted as the
unsigned q' = q + offset and corrected once per block (or 16-quant group) with offset * d_x * sum(xq), which `quantize_q8` precomputes per
vector (xa[XC32], xa[XC16]) so the correction costs one scalar FMA.
Per-block minima (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) take the same d_x * sum(xq), not the
float sum of x: the result is then exactly W @ dequant(xq), whose error is x's rounding
noise weighted by the weights d*q + m, which a minimum centres near zero. With the float
sum the minimum escapes the noise, which is then weighted by d*q alone (0..15d for Q4_1,
not centred), several times the variance: on smollm2 (Q4_1) that raised the conformance
KL divergence from 5.9e-3 to 3.2e-2.

Precision: every kernel here equals `dequantize(W) @ dequant(quantize(x))` to float32
rounding (tests/unit/test_cpu_q8_scheme.py); against the exact product quantizing x costs
NMSE ~3e-5 (heavier for single outputs that happen to be near zero); `_rows` has the exact
float kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import formats as F
from ._rows import XA_ROWS, XC16, XC32, XD, XI32, _i8, _k3_scale, _k4_scale_min
from ._simd import (
    PREFETCH_BYTES,
    b_bitsel,
    b_crumbs,
    b_hbits16,
    b_load,
    b_nib,
    b_or,
    b_shl,
    ld_f16,
    prefetch,
    q8_block,
    vadd8,
    vdp,
    vdp2,
    vdps,
    vhsum8,
    vz8,
)

_jit = njit(fastmath=True, cache=True, nogil=True)


# No fast-math here, said explicitly (Numba hands a caller's fastmath to callees that leave it
# unset): it turns max|x| / 127 into a multiply by an inexact reciprocal, and which quants near
# a rounding tie go up would then depend on the compiler, not on the scheme.
@njit(fastmath=False, cache=True, nogil=True)
def quantize_q8(x, xq, xa):
    """Quantize x per 32-element block into xq (int8) and fill xa[XD], xa[XC16], xa[XC32], xa[XI32]
    (see `_rows`): d = max|x|/127, xq = rint(x * (1/d)). len(x) must be a multiple of 32.
    """
    xd = xa[XD]
    xc16 = xa[XC16]
    xc32 = xa[XC32]
    xi32 = xa[XI32]
    for b in range(x.shape[0] // 32):
        q8_block(x, b, xq, xd, xc16, xc32, xi32)


@njit(fastmath=False, cache=True, nogil=True)
def quantize_rows(X):
    """(XQ int8[T, cols], XA float32[T, XA_ROWS, cols / 16]): each row of X through `quantize_q8`,
    serially: the kernels' parallel loops follow, and a parallel region here would cost them a
    second barrier (~20-40 us idle on a busy machine) for microseconds of work."""
    T, cols = X.shape
    XQ = np.empty((T, cols), np.int8)
    XA = np.empty((T, XA_ROWS, cols // 16), np.float32)
    for t in range(T):
        quantize_q8(X[t], XQ[t], XA[t])
    return XQ, XA


@_jit
def qdot_q4_0(wr, xq, xa):
    """Q4_0 row . x with int8 x (layout: `_rows.dot_q4_0`)."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 18):
        prefetch(wr, b * 18 + PREFETCH_BYTES)
        o = b * 18
        d = ld_f16(wr, o)
        acc = vdp(acc, b_nib(wr, o + 2), xq, b * 32, d * xa[XD, b])
        tail += d * xa[XC32, b]
    return vhsum8(acc) - 8.0 * tail


@_jit
def qdot_q4_1(wr, xq, xa):
    """Q4_1 row . x with int8 x."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 20):
        prefetch(wr, b * 20 + PREFETCH_BYTES)
        o = b * 20
        acc = vdp(acc, b_nib(wr, o + 4), xq, b * 32, ld_f16(wr, o) * xa[XD, b])
        tail += ld_f16(wr, o + 2) * xa[XC32, b]
    return vhsum8(acc) + tail


@_jit
def qdot_q5_0(wr, xq, xa):
    """Q5_0 row . x with int8 x."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 22):
        prefetch(wr, b * 22 + PREFETCH_BYTES)
        o = b * 22
        d = ld_f16(wr, o)
        acc = vdp(acc, b_or(b_nib(wr, o + 6), b_hbits16(wr, o + 2)), xq, b * 32, d * xa[XD, b])
        tail += d * xa[XC32, b]
    return vhsum8(acc) - 16.0 * tail


@_jit
def qdot_q5_1(wr, xq, xa):
    """Q5_1 row . x with int8 x."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 24):
        prefetch(wr, b * 24 + PREFETCH_BYTES)
        o = b * 24
        acc = vdp(acc, b_or(b_nib(wr, o + 8), b_hbits16(wr, o + 4)), xq, b * 32, ld_f16(wr, o) * xa[XD, b])
        tail += ld_f16(wr, o + 2) * xa[XC32, b]
    return vhsum8(acc) + tail


@_jit
def qdot_q8_0(wr, xq, xa):
    """Q8_0 row . x with int8 x; signed quants through `vdps` (no offset, no correction)."""
    acc = vz8()
    for b in range(wr.shape[0] // 34):
        prefetch(wr, b * 34 + PREFETCH_BYTES)
        o = b * 34
        d = ld_f16(wr, o)
        acc = vdps(acc, b_load(wr, o + 2), xq, b * 32, d * xa[XD, b])
    return vhsum8(acc)


@_jit
def qdot_q2_k(wr, xq, xa):
    """Q2_K row . x with int8 x; a 32-quant run c = h*4+s spans scale groups 2c, 2c+1."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 84):
        prefetch(wr, b * 84 + PREFETCH_BYTES)
        prefetch(wr, b * 84 + PREFETCH_BYTES + 64)
        o = b * 84
        d = ld_f16(wr, o + 80)
        dmin = ld_f16(wr, o + 82)
        for c in range(8):
            g = 2 * c
            sc0 = np.int32(wr[o + g])
            sc1 = np.int32(wr[o + g + 1])
            dx = d * xa[XD, b * 8 + c]
            a = b_crumbs(wr, o + 16 + (c >> 2) * 32, 2 * (c & 3), 3)
            acc = vdp2(acc, a, xq, b * 256 + c * 32, dx * np.float32(sc0 & 15), dx * np.float32(sc1 & 15))
            tail += dmin * (np.float32(sc0 >> 4) * xa[XC16, b * 16 + g] + np.float32(sc1 >> 4) * xa[XC16, b * 16 + g + 1])
    return vhsum8(acc) - tail


@_jit
def qdot_q3_k(wr, xq, xa):
    """Q3_K row . x with int8 x; q' = low2 + 4*hbit in 0..7, value q' - 4."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 110):
        prefetch(wr, b * 110 + PREFETCH_BYTES)
        prefetch(wr, b * 110 + PREFETCH_BYTES + 64)
        o = b * 110
        d = ld_f16(wr, o + 108)
        for c in range(8):
            h = c >> 2
            s = c & 3
            g = 2 * c
            a = b_or(b_crumbs(wr, o + 32 + h * 32, 2 * s, 3), b_bitsel(wr, o, h * 4 + s, 4))
            dx = d * xa[XD, b * 8 + c]
            sc0 = np.float32(_k3_scale(wr, o + 96, g))
            sc1 = np.float32(_k3_scale(wr, o + 96, g + 1))
            acc = vdp2(acc, a, xq, b * 256 + c * 32, dx * sc0, dx * sc1)
            tail += d * (sc0 * xa[XC16, b * 16 + g] + sc1 * xa[XC16, b * 16 + g + 1])
    return vhsum8(acc) - 4.0 * tail


@_jit
def qdot_q4_k(wr, xq, xa):
    """Q4_K row . x with int8 x; its 32-quant sub-blocks line up with the q8 blocks."""
    a0 = vz8()
    a1 = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 144):
        prefetch(wr, b * 144 + PREFETCH_BYTES)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 128)
        o = b * 144
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for c in range(4):
            sc0, mn0 = _k4_scale_min(wr, o + 4, 2 * c)
            sc1, mn1 = _k4_scale_min(wr, o + 4, 2 * c + 1)
            qo = o + 16 + c * 32
            xb = b * 8 + 2 * c
            a0 = vdp(a0, b_crumbs(wr, qo, 0, 15), xq, xb * 32, d * np.float32(sc0) * xa[XD, xb])
            a1 = vdp(a1, b_crumbs(wr, qo, 4, 15), xq, xb * 32 + 32, d * np.float32(sc1) * xa[XD, xb + 1])
            tail += dmin * (np.float32(mn0) * xa[XC32, xb] + np.float32(mn1) * xa[XC32, xb + 1])
    return vhsum8(vadd8(a0, a1)) - tail


@_jit
def qdot_q5_k(wr, xq, xa):
    """Q5_K row . x with int8 x."""
    a0 = vz8()
    a1 = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 176):
        prefetch(wr, b * 176 + PREFETCH_BYTES)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 128)
        o = b * 176
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for c in range(4):
            j = 2 * c
            sc0, mn0 = _k4_scale_min(wr, o + 4, j)
            sc1, mn1 = _k4_scale_min(wr, o + 4, j + 1)
            qo = o + 48 + c * 32
            xb = b * 8 + j
            q0 = b_or(b_crumbs(wr, qo, 0, 15), b_bitsel(wr, o + 16, j, 16))
            q1 = b_or(b_crumbs(wr, qo, 4, 15), b_bitsel(wr, o + 16, j + 1, 16))
            a0 = vdp(a0, q0, xq, xb * 32, d * np.float32(sc0) * xa[XD, xb])
            a1 = vdp(a1, q1, xq, xb * 32 + 32, d * np.float32(sc1) * xa[XD, xb + 1])
            tail += dmin * (np.float32(mn0) * xa[XC32, xb] + np.float32(mn1) * xa[XC32, xb + 1])
    return vhsum8(vadd8(a0, a1)) - tail


@_jit
def qdot_q6_k(wr, xq, xa):
    """Q6_K row . x with int8 x; run c = h*4+s of 32 quants spans scale groups 2c, 2c+1."""
    acc = vz8()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 210):
        prefetch(wr, b * 210 + PREFETCH_BYTES)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 128)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 192)
        o = b * 210
        d = ld_f16(wr, o + 208)
        for c in range(8):
            h = c >> 2
            s = c & 3
            g = 2 * c
            lo = b_crumbs(wr, o + h * 64 + (s & 1) * 32, 4 * (s >> 1), 15)
            a = b_or(lo, b_shl(b_crumbs(wr, o + 128 + h * 32, 2 * s, 3), 4))
            dx = d * xa[XD, b * 8 + c]
            sc0 = np.float32(_i8(wr[o + 192 + g]))
            sc1 = np.float32(_i8(wr[o + 193 + g]))
            acc = vdp2(acc, a, xq, b * 256 + c * 32, dx * sc0, dx * sc1)
            tail += d * (sc0 * xa[XC16, b * 16 + g] + sc1 * xa[XC16, b * 16 + g + 1])
    return vhsum8(acc) - 32.0 * tail


# ----------------------------------------------------------------- two rows at a time
#
# For the 32-quant formats the per-block x loads (xq, its scale and correction) are
# shared by two rows and the two accumulation chains interleave: +8-10% on one core
# (Q4_1 15.8 -> 17.3 GB/s, Q5_0 15.6 -> 16.8, Q8_0 31 -> 34).


@_jit
def qdot2_q4_0(w0, w1, xq, xa):
    """(w0 . x, w1 . x) for two Q4_0 rows, int8 x."""
    a0 = vz8()
    a1 = vz8()
    t0 = np.float32(0.0)
    t1 = np.float32(0.0)
    for b in range(w0.shape[0] // 18):
        prefetch(w0, b * 18 + PREFETCH_BYTES)
        prefetch(w1, b * 18 + PREFETCH_BYTES)
        o = b * 18
        xd = xa[XD, b]
        xc = xa[XC32, b]
        d0 = ld_f16(w0, o)
        d1 = ld_f16(w1, o)
        a0 = vdp(a0, b_nib(w0, o + 2), xq, b * 32, d0 * xd)
        a1 = vdp(a1, b_nib(w1, o + 2), xq, b * 32, d1 * xd)
        t0 += d0 * xc
        t1 += d1 * xc
    return vhsum8(a0) - 8.0 * t0, vhsum8(a1) - 8.0 * t1


@_jit
def qdot2_q4_1(w0, w1, xq, xa):
    """(w0 . x, w1 . x) for two Q4_1 rows, int8 x."""
    a0 = vz8()
    a1 = vz8()
    t0 = np.float32(0.0)
    t1 = np.float32(0.0)
    for b in range(w0.shape[0] // 20):
        prefetch(w0, b * 20 + PREFETCH_BYTES)
        prefetch(w1, b * 20 + PREFETCH_BYTES)
        o = b * 20
        xd = xa[XD, b]
        xs = xa[XC32, b]
        a0 = vdp(a0, b_nib(w0, o + 4), xq, b * 32, ld_f16(w0, o) * xd)
        a1 = vdp(a1, b_nib(w1, o + 4), xq, b * 32, ld_f16(w1, o) * xd)
        t0 += ld_f16(w0, o + 2) * xs
        t1 += ld_f16(w1, o + 2) * xs
    return vhsum8(a0) + t0, vhsum8(a1) + t1


@_jit
def qdot2_q5_0(w0, w1, xq, xa):
    """(w0 . x, w1 . x) for two Q5_0 rows, int8 x."""
    a0 = vz8()
    a1 = vz8()
    t0 = np.float32(0.0)
    t1 = np.float32(0.0)
    for b in range(w0.shape[0] // 22):
        prefetch(w0, b * 22 + PREFETCH_BYTES)
        prefetch(w1, b * 22 + PREFETCH_BYTES)
        o = b * 22
        xd = xa[XD, b]
        xc = xa[XC32, b]
        d0 = ld_f16(w0, o)
        d1 = ld_f16(w1, o)
        a0 = vdp(a0, b_or(b_nib(w0, o + 6), b_hbits16(w0, o + 2)), xq, b * 32, d0 * xd)
        a1 = vdp(a1, b_or(b_nib(w1, o + 6), b_hbits16(w1, o + 2)), xq, b * 32, d1 * xd)
        t0 += d0 * xc
        t1 += d1 * xc
    return vhsum8(a0) - 16.0 * t0, vhsum8(a1) - 16.0 * t1


@_jit
def qdot2_q5_1(w0, w1, xq, xa):
    """(w0 . x, w1 . x) for two Q5_1 rows, int8 x."""
    a0 = vz8()
    a1 = vz8()
    t0 = np.float32(0.0)
    t1 = np.float32(0.0)
    for b in range(w0.shape[0] // 24):
        prefetch(w0, b * 24 + PREFETCH_BYTES)
        prefetch(w1, b * 24 + PREFETCH_BYTES)
        o = b * 24
        xd = xa[XD, b]
        xs = xa[XC32, b]
        a0 = vdp(a0, b_or(b_nib(w0, o + 8), b_hbits16(w0, o + 4)), xq, b * 32, ld_f16(w0, o) * xd)
        a1 = vdp(a1, b_or(b_nib(w1, o + 8), b_hbits16(w1, o + 4)), xq, b * 32, ld_f16(w1, o) * xd)
        t0 += ld_f16(w0, o + 2) * xs
        t1 += ld_f16(w1, o + 2) * xs
    return vhsum8(a0) + t0, vhsum8(a1) + t1


@_jit
def qdot2_q8_0(w0, w1, xq, xa):
    """(w0 . x, w1 . x) for two Q8_0 rows, int8 x."""
    a0 = vz8()
    a1 = vz8()
    for b in range(w0.shape[0] // 34):
        prefetch(w0, b * 34 + PREFETCH_BYTES)
        prefetch(w1, b * 34 + PREFETCH_BYTES)
        o = b * 34
        xd = xa[XD, b]
        a0 = vdps(a0, b_load(w0, o + 2), xq, b * 32, ld_f16(w0, o) * xd)
        a1 = vdps(a1, b_load(w1, o + 2), xq, b * 32, ld_f16(w1, o) * xd)
    return vhsum8(a0), vhsum8(a1)


@_jit
def qdot_rows(code, w, xq, xa, out, r0, r1):
    """out[r] = w[r] . x for r in [r0, r1) from int8 activations (quantized formats only).

    xq and xa from `quantize_q8(x, xq, xa)`. Float formats
    (F32/F16/BF16) have no int8 variant and leave out untouched.
    """
    # pairs of rows for the 32-quant formats, then the odd row alone
    r2 = r0 + (r1 - r0) // 2 * 2
    if code == F.Q4_0:
        for r in range(r0, r2, 2):
            out[r], out[r + 1] = qdot2_q4_0(w[r], w[r + 1], xq, xa)
        if r2 < r1:
            out[r2] = qdot_q4_0(w[r2], xq, xa)
    elif code == F.Q4_1:
        for r in range(r0, r2, 2):
            out[r], out[r + 1] = qdot2_q4_1(w[r], w[r + 1], xq, xa)
        if r2 < r1:
            out[r2] = qdot_q4_1(w[r2], xq, xa)
    elif code == F.Q5_0:
        for r in range(r0, r2, 2):
            out[r], out[r + 1] = qdot2_q5_0(w[r], w[r + 1], xq, xa)
        if r2 < r1:
            out[r2] = qdot_q5_0(w[r2], xq, xa)
    elif code == F.Q5_1:
        for r in range(r0, r2, 2):
            out[r], out[r + 1] = qdot2_q5_1(w[r], w[r + 1], xq, xa)
        if r2 < r1:
            out[r2] = qdot_q5_1(w[r2], xq, xa)
    elif code == F.Q8_0:
        for r in range(r0, r2, 2):
            out[r], out[r + 1] = qdot2_q8_0(w[r], w[r + 1], xq, xa)
        if r2 < r1:
            out[r2] = qdot_q8_0(w[r2], xq, xa)
    elif code == F.Q2_K:
        for r in range(r0, r1):
            out[r] = qdot_q2_k(w[r], xq, xa)
    elif code == F.Q3_K:
        for r in range(r0, r1):
            out[r] = qdot_q3_k(w[r], xq, xa)
    elif code == F.Q4_K:
        for r in range(r0, r1):
            out[r] = qdot_q4_k(w[r], xq, xa)
    elif code == F.Q5_K:
        for r in range(r0, r1):
            out[r] = qdot_q5_k(w[r], xq, xa)
    elif code == F.Q6_K:
        for r in range(r0, r1):
            out[r] = qdot_q6_k(w[r], xq, xa)
