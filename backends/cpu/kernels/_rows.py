"""Per-row kernels for each GGML format: fused dequantize+dot, and row dequantization.

A row `wr` is the uint8 bytes of one weight row exactly as stored in the GGUF file.
Every kernel walks it block by block and unpacks 16 quants at a time into int32 lanes
(`_simd.vq`), converts them to float and multiplies with x, so no float copy of the
weights is ever made. The block scale is applied once per 16- or 32-quant run to a
16-lane partial product kept in registers; lanes are summed once per row.

Offsets inside blocks follow gguf/quants.py (the reference the tests compare with):
see the layout comment on each function.

Formats with a per-block minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) need sum(x) over each
run; `xa[XS16]`/`xa[XS32]` hold sums of x over 16/32-element runs, computed once per
vector (`x_sums`), so the minimum costs one scalar FMA per run instead of a vector op per quant.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import formats as F
from ._simd import (
    PREFETCH_BYTES,
    ld_bf16_elem,
    ld_f16,
    ld_f16_elem,
    ld_f32_elem,
    prefetch,
    vadd,
    vaffine,
    vbits32,
    vdot_x,
    vfma_s,
    vfma_vx,
    vfma_x,
    vhsum,
    vld_bf16,
    vld_f16,
    vld_f32b,
    vmadd_x,
    vor,
    vq,
    vq8,
    vshl,
    vst,
    vsubk,
    vzero,
    xsum16,
)

_jit = njit(fastmath=True, cache=True, nogil=True)

# ----------------------------------------------------------------- shared helpers


# Rows of the per-vector side array `xa` (float32[XA_ROWS, cols // 16]) that the dot
# kernels read; the q8 kernels use the last three, the float kernels the first two.
XS16 = 0  # sum of x over each 16-element run
XS32 = 1  # sum of x over each 32-element block (first cols//32 entries)
XD = 2  # q8 scale of each 32-element block
XC16 = 3  # q8 scale * sum of the int8 quants over each 16-element run
XC32 = 4  # the same per 32-element block
XI32 = 5  # -128 times the sum of the int8 quants of each 32-element block, as int32 bits (read
# with a view): what Q8_0's VNNI dots of q + 128 add back, loaded straight into a vector add
XA_ROWS = 6


@_jit
def x_sums(x, xa):
    """Fill xa[XS16] and xa[XS32] with the run sums of x that the per-block minima need
    (one scalar FMA per run instead of a vector op per quant)."""
    xs16 = xa[XS16]
    xs32 = xa[XS32]
    for i in range(x.shape[0] // 16):
        xs16[i] = xsum16(x, i)
    for i in range(x.shape[0] // 32):
        xs32[i] = xs16[2 * i] + xs16[2 * i + 1]


@_jit
def _i8(v):
    # reinterpret a byte as int8 without a branch
    return (np.int32(v) ^ 128) - 128


@_jit
def _k4_scale_min(wr, so, j):
    # 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at wr[so:]:
    # bytes 0-3 low 6 bits = scales 0-3, bytes 4-7 = mins 0-3, bytes 8-11 nibbles hold
    # the low 4 bits of scales/mins 4-7 and bytes 0-7's top 2 bits their high bits.
    if j < 4:
        sc = np.int32(wr[so + j]) & 63
        mn = np.int32(wr[so + j + 4]) & 63
    else:
        sc = (np.int32(wr[so + j + 4]) & 15) | ((np.int32(wr[so + j - 4]) >> 6) << 4)
        mn = (np.int32(wr[so + j + 4]) >> 4) | ((np.int32(wr[so + j]) >> 6) << 4)
    return sc, mn


@_jit
def _k3_scale(wr, so, g):
    # 6-bit signed scale of 16-quant group g (0..15) of Q3_K, 12 packed bytes at wr[so:]:
    # low nibbles in bytes 0-7 (low nibble for g<8, high nibble for g>=8), high 2 bits
    # in bytes 8-11 (byte 8 + g%4, bit pair g//4); stored with an offset of 32.
    if g < 8:
        lo = np.int32(wr[so + g]) & 15
    else:
        lo = np.int32(wr[so + g - 8]) >> 4
    hi = (np.int32(wr[so + 8 + (g & 3)]) >> (2 * (g >> 2))) & 3
    return (lo | (hi << 4)) - 32


# ----------------------------------------------------------------- fused dot, 32-quant blocks


@_jit
def dot_q4_0(wr, x, xa):
    """Q4_0 row . x. Block (18 B): f16 d, 16 bytes; quant j = low nibble of byte j,
    quant j+16 = high nibble; value d*(q-8)."""
    acc = vzero()
    for b in range(wr.shape[0] // 18):
        prefetch(wr, b * 18 + PREFETCH_BYTES)
        o = b * 18
        xo = b * 32
        t = vdot_x(vsubk(vq(wr, o + 2, 0, 15), 8), x, xo)
        t = vfma_x(t, vsubk(vq(wr, o + 2, 4, 15), 8), x, xo + 16)
        acc = vfma_s(acc, t, ld_f16(wr, o))
    return vhsum(acc)


@_jit
def dot_q4_1(wr, x, xa):
    """Q4_1 row . x. Block (20 B): f16 d, f16 m, 16 nibble bytes as Q4_0; value d*q+m."""
    acc = vzero()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 20):
        prefetch(wr, b * 20 + PREFETCH_BYTES)
        o = b * 20
        xo = b * 32
        t = vdot_x(vq(wr, o + 4, 0, 15), x, xo)
        t = vfma_x(t, vq(wr, o + 4, 4, 15), x, xo + 16)
        acc = vfma_s(acc, t, ld_f16(wr, o))
        tail += ld_f16(wr, o + 2) * xa[XS32, b]
    return vhsum(acc) + tail


@_jit
def dot_q5_0(wr, x, xa):
    """Q5_0 row . x. Block (22 B): f16 d, u32 qh, 16 nibble bytes; bit j of qh is bit 4
    of quant j; value d*(q-16)."""
    acc = vzero()
    for b in range(wr.shape[0] // 22):
        prefetch(wr, b * 22 + PREFETCH_BYTES)
        o = b * 22
        xo = b * 32
        lo = vsubk(vor(vq(wr, o + 6, 0, 15), vbits32(wr, o + 2, 0, 4)), 16)
        hi = vsubk(vor(vq(wr, o + 6, 4, 15), vbits32(wr, o + 2, 16, 4)), 16)
        t = vfma_x(vdot_x(lo, x, xo), hi, x, xo + 16)
        acc = vfma_s(acc, t, ld_f16(wr, o))
    return vhsum(acc)


@_jit
def dot_q5_1(wr, x, xa):
    """Q5_1 row . x. Block (24 B): f16 d, f16 m, u32 qh, 16 nibble bytes; value d*q+m."""
    acc = vzero()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 24):
        prefetch(wr, b * 24 + PREFETCH_BYTES)
        o = b * 24
        xo = b * 32
        lo = vor(vq(wr, o + 8, 0, 15), vbits32(wr, o + 4, 0, 4))
        hi = vor(vq(wr, o + 8, 4, 15), vbits32(wr, o + 4, 16, 4))
        t = vfma_x(vdot_x(lo, x, xo), hi, x, xo + 16)
        acc = vfma_s(acc, t, ld_f16(wr, o))
        tail += ld_f16(wr, o + 2) * xa[XS32, b]
    return vhsum(acc) + tail


@_jit
def dot_q8_0(wr, x, xa):
    """Q8_0 row . x. Block (34 B): f16 d, 32 int8 quants; value d*q."""
    acc = vzero()
    for b in range(wr.shape[0] // 34):
        prefetch(wr, b * 34 + PREFETCH_BYTES)
        o = b * 34
        xo = b * 32
        t = vfma_x(vdot_x(vq8(wr, o + 2), x, xo), vq8(wr, o + 18), x, xo + 16)
        acc = vfma_s(acc, t, ld_f16(wr, o))
    return vhsum(acc)


# ----------------------------------------------------------------- fused dot, K-quants (256/super-block)


@_jit
def dot_q2_k(wr, x, xa):
    """Q2_K row . x. Super-block (84 B): 16 scale bytes (low nibble scale, high nibble
    min, per 16-quant group), 64 bytes of 2-bit quants, f16 d, f16 dmin. Quant
    h*128+s*32+l = (qs[h*32+l] >> 2s) & 3; value d*sc*q - dmin*mn."""
    a0 = vzero()
    a1 = vzero()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 84):
        prefetch(wr, b * 84 + PREFETCH_BYTES)
        prefetch(wr, b * 84 + PREFETCH_BYTES + 64)
        o = b * 84
        xo = b * 256
        d = ld_f16(wr, o + 80)
        dmin = ld_f16(wr, o + 82)
        for g in range(0, 16, 2):
            # g = h*8 + s*2 + k; the pair (k=0, k=1) shares h and s
            h = g >> 3
            s = (g >> 1) & 3
            sc0 = np.int32(wr[o + g])
            sc1 = np.int32(wr[o + g + 1])
            a0 = vmadd_x(a0, vq(wr, o + 16 + h * 32, 2 * s, 3), x, xo + g * 16, d * (sc0 & 15))
            a1 = vmadd_x(a1, vq(wr, o + 32 + h * 32, 2 * s, 3), x, xo + g * 16 + 16, d * (sc1 & 15))
            tail -= dmin * ((sc0 >> 4) * xa[XS16, b * 16 + g] + (sc1 >> 4) * xa[XS16, b * 16 + g + 1])
    return vhsum(vadd(a0, a1)) + tail


@_jit
def dot_q3_k(wr, x, xa):
    """Q3_K row . x. Super-block (110 B): 32 bytes hmask, 64 bytes 2-bit quants, 12
    bytes packed 6-bit scales, f16 d. Quant h*128+s*32+l has low bits
    (qs[h*32+l] >> 2s) & 3 and bit (hmask[l] >> (4h+s)) & 1, value d*sc*(low + 4*bit - 4)."""
    a0 = vzero()
    a1 = vzero()
    for b in range(wr.shape[0] // 110):
        prefetch(wr, b * 110 + PREFETCH_BYTES)
        prefetch(wr, b * 110 + PREFETCH_BYTES + 64)
        o = b * 110
        xo = b * 256
        d = ld_f16(wr, o + 108)
        for g in range(0, 16, 2):
            h = g >> 3
            s = (g >> 1) & 3
            hb = h * 4 + s
            q0 = vsubk(vor(vq(wr, o + 32 + h * 32, 2 * s, 3), vshl(vq(wr, o, hb, 1), 2)), 4)
            q1 = vsubk(vor(vq(wr, o + 48 + h * 32, 2 * s, 3), vshl(vq(wr, o + 16, hb, 1), 2)), 4)
            a0 = vmadd_x(a0, q0, x, xo + g * 16, d * _k3_scale(wr, o + 96, g))
            a1 = vmadd_x(a1, q1, x, xo + g * 16 + 16, d * _k3_scale(wr, o + 96, g + 1))
    return vhsum(vadd(a0, a1))


@_jit
def dot_q4_k(wr, x, xa):
    """Q4_K row . x. Super-block (144 B): f16 d, f16 dmin, 12 bytes packed 6-bit
    scales/mins, 128 nibble bytes. Sub-block j=2c+k (32 quants) = (qs[c*32+l] >> 4k) & 15;
    value d*sc_j*q - dmin*mn_j."""
    a0 = vzero()
    a1 = vzero()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 144):
        prefetch(wr, b * 144 + PREFETCH_BYTES)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 128)
        o = b * 144
        xo = b * 256
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for c in range(4):
            sc0, mn0 = _k4_scale_min(wr, o + 4, 2 * c)
            sc1, mn1 = _k4_scale_min(wr, o + 4, 2 * c + 1)
            qo = o + 16 + c * 32
            e = xo + c * 64
            t0 = vfma_x(vdot_x(vq(wr, qo, 0, 15), x, e), vq(wr, qo + 16, 0, 15), x, e + 16)
            t1 = vfma_x(vdot_x(vq(wr, qo, 4, 15), x, e + 32), vq(wr, qo + 16, 4, 15), x, e + 48)
            a0 = vfma_s(a0, t0, d * sc0)
            a1 = vfma_s(a1, t1, d * sc1)
            g = e >> 4
            tail -= dmin * (mn0 * xa[XS32, g >> 1] + mn1 * xa[XS32, (g >> 1) + 1])
    return vhsum(vadd(a0, a1)) + tail


@_jit
def dot_q5_k(wr, x, xa):
    """Q5_K row . x. Super-block (176 B): f16 d, f16 dmin, 12 scale bytes as Q4_K,
    32 bytes qh, 128 nibble bytes. Sub-block j adds bit (qh[l] >> j) & 1 as bit 4."""
    a0 = vzero()
    a1 = vzero()
    tail = np.float32(0.0)
    for b in range(wr.shape[0] // 176):
        prefetch(wr, b * 176 + PREFETCH_BYTES)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 128)
        o = b * 176
        xo = b * 256
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for c in range(4):
            j = 2 * c
            sc0, mn0 = _k4_scale_min(wr, o + 4, j)
            sc1, mn1 = _k4_scale_min(wr, o + 4, j + 1)
            qo = o + 48 + c * 32
            e = xo + c * 64
            q00 = vor(vq(wr, qo, 0, 15), vshl(vq(wr, o + 16, j, 1), 4))
            q01 = vor(vq(wr, qo + 16, 0, 15), vshl(vq(wr, o + 32, j, 1), 4))
            q10 = vor(vq(wr, qo, 4, 15), vshl(vq(wr, o + 16, j + 1, 1), 4))
            q11 = vor(vq(wr, qo + 16, 4, 15), vshl(vq(wr, o + 32, j + 1, 1), 4))
            a0 = vfma_s(a0, vfma_x(vdot_x(q00, x, e), q01, x, e + 16), d * sc0)
            a1 = vfma_s(a1, vfma_x(vdot_x(q10, x, e + 32), q11, x, e + 48), d * sc1)
            g = e >> 4
            tail -= dmin * (mn0 * xa[XS32, g >> 1] + mn1 * xa[XS32, (g >> 1) + 1])
    return vhsum(vadd(a0, a1)) + tail


@_jit
def dot_q6_k(wr, x, xa):
    """Q6_K row . x. Super-block (210 B): 128 bytes low nibbles, 64 bytes high 2-bit
    pairs, 16 int8 scales, f16 d. Quant h*128 + r has low bits (ql[h*64 + r%64] >> 4*(r//64)) & 15
    and high bits (qh[h*32 + r%32] >> 2*(r//32)) & 3; value d*sc*(q-32), a scale per 16 quants."""
    a0 = vzero()
    a1 = vzero()
    for b in range(wr.shape[0] // 210):
        prefetch(wr, b * 210 + PREFETCH_BYTES)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 128)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 192)
        o = b * 210
        xo = b * 256
        d = ld_f16(wr, o + 208)
        for g in range(0, 16, 2):
            # the pair g, g+1 is one 32-quant run: same h, k, s; l0/m0 differ by 16
            h = g >> 3
            c = g & 7
            k = c >> 2
            s = c >> 1
            lo = o + h * 64 + (c & 3) * 16
            hi = o + 128 + h * 32
            q0 = vsubk(vor(vq(wr, lo, 4 * k, 15), vshl(vq(wr, hi, 2 * s, 3), 4)), 32)
            q1 = vsubk(vor(vq(wr, lo + 16, 4 * k, 15), vshl(vq(wr, hi + 16, 2 * s, 3), 4)), 32)
            a0 = vmadd_x(a0, q0, x, xo + g * 16, d * _i8(wr[o + 192 + g]))
            a1 = vmadd_x(a1, q1, x, xo + g * 16 + 16, d * _i8(wr[o + 193 + g]))
    return vhsum(vadd(a0, a1))


# ----------------------------------------------------------------- fused dot, float formats


@_jit
def dot_f32(wr, x, xa):
    """F32 row . x (the row given as its bytes)."""
    n = x.shape[0]
    acc = vzero()
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 64 + PREFETCH_BYTES)
        acc = vfma_vx(acc, vld_f32b(wr, i * 64), x, i * 16)
    s = vhsum(acc)
    for i in range(n16 * 16, n):
        s += ld_f32_elem(wr, i) * x[i]
    return s


@_jit
def dot_f16(wr, x, xa):
    """F16 row . x (the row given as its bytes)."""
    n = x.shape[0]
    acc = vzero()
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 32 + PREFETCH_BYTES)
        acc = vfma_vx(acc, vld_f16(wr, i * 32), x, i * 16)
    s = vhsum(acc)
    for i in range(n16 * 16, n):
        s += ld_f16_elem(wr, i) * x[i]
    return s


@_jit
def dot_bf16(wr, x, xa):
    """BF16 row . x (the row given as its bytes)."""
    n = x.shape[0]
    acc = vzero()
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 32 + PREFETCH_BYTES)
        acc = vfma_vx(acc, vld_bf16(wr, i * 32), x, i * 16)
    s = vhsum(acc)
    for i in range(n16 * 16, n):
        s += ld_bf16_elem(wr, i) * x[i]
    return s


@_jit
def dot_rows(code, w, x, xa, out, r0, r1):
    """out[r] = w[r] . x for r in [r0, r1), w in GGML format `code` (serial; callers parallelize).

    xa must hold the sums from `x_sums(x, xa)`. Each branch is a tight loop of one format so the type
    test runs once per call, not per row or block.
    """
    if code == F.Q4_0:
        for r in range(r0, r1):
            out[r] = dot_q4_0(w[r], x, xa)
    elif code == F.Q4_1:
        for r in range(r0, r1):
            out[r] = dot_q4_1(w[r], x, xa)
    elif code == F.Q5_0:
        for r in range(r0, r1):
            out[r] = dot_q5_0(w[r], x, xa)
    elif code == F.Q5_1:
        for r in range(r0, r1):
            out[r] = dot_q5_1(w[r], x, xa)
    elif code == F.Q8_0:
        for r in range(r0, r1):
            out[r] = dot_q8_0(w[r], x, xa)
    elif code == F.Q2_K:
        for r in range(r0, r1):
            out[r] = dot_q2_k(w[r], x, xa)
    elif code == F.Q3_K:
        for r in range(r0, r1):
            out[r] = dot_q3_k(w[r], x, xa)
    elif code == F.Q4_K:
        for r in range(r0, r1):
            out[r] = dot_q4_k(w[r], x, xa)
    elif code == F.Q5_K:
        for r in range(r0, r1):
            out[r] = dot_q5_k(w[r], x, xa)
    elif code == F.Q6_K:
        for r in range(r0, r1):
            out[r] = dot_q6_k(w[r], x, xa)
    elif code == F.F32:
        for r in range(r0, r1):
            out[r] = dot_f32(w[r], x, xa)
    elif code == F.F16:
        for r in range(r0, r1):
            out[r] = dot_f16(w[r], x, xa)
    elif code == F.BF16:
        for r in range(r0, r1):
            out[r] = dot_bf16(w[r], x, xa)


# ----------------------------------------------------------------- row dequantization


@_jit
def deq_q4_0(wr, o_):
    """Dequantize a Q4_0 row into float32 o_."""
    for b in range(wr.shape[0] // 18):
        prefetch(wr, b * 18 + PREFETCH_BYTES)
        o = b * 18
        d = ld_f16(wr, o)
        vst(o_, b * 32, vaffine(vsubk(vq(wr, o + 2, 0, 15), 8), d, 0.0))
        vst(o_, b * 32 + 16, vaffine(vsubk(vq(wr, o + 2, 4, 15), 8), d, 0.0))


@_jit
def deq_q4_1(wr, o_):
    """Dequantize a Q4_1 row into float32 o_."""
    for b in range(wr.shape[0] // 20):
        prefetch(wr, b * 20 + PREFETCH_BYTES)
        o = b * 20
        d = ld_f16(wr, o)
        m = ld_f16(wr, o + 2)
        vst(o_, b * 32, vaffine(vq(wr, o + 4, 0, 15), d, m))
        vst(o_, b * 32 + 16, vaffine(vq(wr, o + 4, 4, 15), d, m))


@_jit
def deq_q5_0(wr, o_):
    """Dequantize a Q5_0 row into float32 o_."""
    for b in range(wr.shape[0] // 22):
        prefetch(wr, b * 22 + PREFETCH_BYTES)
        o = b * 22
        d = ld_f16(wr, o)
        vst(o_, b * 32, vaffine(vsubk(vor(vq(wr, o + 6, 0, 15), vbits32(wr, o + 2, 0, 4)), 16), d, 0.0))
        vst(o_, b * 32 + 16, vaffine(vsubk(vor(vq(wr, o + 6, 4, 15), vbits32(wr, o + 2, 16, 4)), 16), d, 0.0))


@_jit
def deq_q5_1(wr, o_):
    """Dequantize a Q5_1 row into float32 o_."""
    for b in range(wr.shape[0] // 24):
        prefetch(wr, b * 24 + PREFETCH_BYTES)
        o = b * 24
        d = ld_f16(wr, o)
        m = ld_f16(wr, o + 2)
        vst(o_, b * 32, vaffine(vor(vq(wr, o + 8, 0, 15), vbits32(wr, o + 4, 0, 4)), d, m))
        vst(o_, b * 32 + 16, vaffine(vor(vq(wr, o + 8, 4, 15), vbits32(wr, o + 4, 16, 4)), d, m))


@_jit
def deq_q8_0(wr, o_):
    """Dequantize a Q8_0 row into float32 o_."""
    for b in range(wr.shape[0] // 34):
        prefetch(wr, b * 34 + PREFETCH_BYTES)
        o = b * 34
        d = ld_f16(wr, o)
        vst(o_, b * 32, vaffine(vq8(wr, o + 2), d, 0.0))
        vst(o_, b * 32 + 16, vaffine(vq8(wr, o + 18), d, 0.0))


@_jit
def deq_q2_k(wr, o_):
    """Dequantize a Q2_K row into float32 o_."""
    for b in range(wr.shape[0] // 84):
        prefetch(wr, b * 84 + PREFETCH_BYTES)
        prefetch(wr, b * 84 + PREFETCH_BYTES + 64)
        o = b * 84
        e = b * 256
        d = ld_f16(wr, o + 80)
        dmin = ld_f16(wr, o + 82)
        for g in range(16):
            h = g >> 3
            s = (g >> 1) & 3
            sc = np.int32(wr[o + g])
            q = vq(wr, o + 16 + h * 32 + (g & 1) * 16, 2 * s, 3)
            vst(o_, e + g * 16, vaffine(q, d * (sc & 15), -dmin * (sc >> 4)))


@_jit
def deq_q3_k(wr, o_):
    """Dequantize a Q3_K row into float32 o_."""
    for b in range(wr.shape[0] // 110):
        prefetch(wr, b * 110 + PREFETCH_BYTES)
        prefetch(wr, b * 110 + PREFETCH_BYTES + 64)
        o = b * 110
        e = b * 256
        d = ld_f16(wr, o + 108)
        for g in range(16):
            h = g >> 3
            s = (g >> 1) & 3
            k16 = (g & 1) * 16
            q = vsubk(vor(vq(wr, o + 32 + h * 32 + k16, 2 * s, 3), vshl(vq(wr, o + k16, h * 4 + s, 1), 2)), 4)
            vst(o_, e + g * 16, vaffine(q, d * _k3_scale(wr, o + 96, g), 0.0))


@_jit
def deq_q4_k(wr, o_):
    """Dequantize a Q4_K row into float32 o_."""
    for b in range(wr.shape[0] // 144):
        prefetch(wr, b * 144 + PREFETCH_BYTES)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 144 + PREFETCH_BYTES + 128)
        o = b * 144
        e = b * 256
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for j in range(8):
            sc, mn = _k4_scale_min(wr, o + 4, j)
            qo = o + 16 + (j >> 1) * 32
            sh = 4 * (j & 1)
            ds = d * sc
            dm = -dmin * mn
            vst(o_, e + j * 32, vaffine(vq(wr, qo, sh, 15), ds, dm))
            vst(o_, e + j * 32 + 16, vaffine(vq(wr, qo + 16, sh, 15), ds, dm))


@_jit
def deq_q5_k(wr, o_):
    """Dequantize a Q5_K row into float32 o_."""
    for b in range(wr.shape[0] // 176):
        prefetch(wr, b * 176 + PREFETCH_BYTES)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 176 + PREFETCH_BYTES + 128)
        o = b * 176
        e = b * 256
        d = ld_f16(wr, o)
        dmin = ld_f16(wr, o + 2)
        for j in range(8):
            sc, mn = _k4_scale_min(wr, o + 4, j)
            qo = o + 48 + (j >> 1) * 32
            sh = 4 * (j & 1)
            ds = d * sc
            dm = -dmin * mn
            q0 = vor(vq(wr, qo, sh, 15), vshl(vq(wr, o + 16, j, 1), 4))
            q1 = vor(vq(wr, qo + 16, sh, 15), vshl(vq(wr, o + 32, j, 1), 4))
            vst(o_, e + j * 32, vaffine(q0, ds, dm))
            vst(o_, e + j * 32 + 16, vaffine(q1, ds, dm))


@_jit
def deq_q6_k(wr, o_):
    """Dequantize a Q6_K row into float32 o_."""
    for b in range(wr.shape[0] // 210):
        prefetch(wr, b * 210 + PREFETCH_BYTES)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 64)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 128)
        prefetch(wr, b * 210 + PREFETCH_BYTES + 192)
        o = b * 210
        e = b * 256
        d = ld_f16(wr, o + 208)
        for g in range(16):
            h = g >> 3
            c = g & 7
            q = vor(vq(wr, o + h * 64 + (c & 3) * 16, 4 * (c >> 2), 15), vshl(vq(wr, o + 128 + h * 32 + (c & 1) * 16, 2 * (c >> 1), 3), 4))
            vst(o_, e + g * 16, vaffine(vsubk(q, 32), d * _i8(wr[o + 192 + g]), 0.0))


@_jit
def deq_f32(wr, o_):
    """Copy an F32 row (given as bytes) into float32 o_."""
    n = o_.shape[0]
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 64 + PREFETCH_BYTES)
        vst(o_, i * 16, vld_f32b(wr, i * 64))
    for i in range(n16 * 16, n):
        o_[i] = ld_f32_elem(wr, i)


@_jit
def deq_f16(wr, o_):
    """Convert an F16 row (given as bytes) into float32 o_."""
    n = o_.shape[0]
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 32 + PREFETCH_BYTES)
        vst(o_, i * 16, vld_f16(wr, i * 32))
    for i in range(n16 * 16, n):
        o_[i] = ld_f16_elem(wr, i)


@_jit
def deq_bf16(wr, o_):
    """Convert a BF16 row (given as bytes) into float32 o_."""
    n = o_.shape[0]
    n16 = n // 16
    for i in range(n16):
        prefetch(wr, i * 32 + PREFETCH_BYTES)
        vst(o_, i * 16, vld_bf16(wr, i * 32))
    for i in range(n16 * 16, n):
        o_[i] = ld_bf16_elem(wr, i)


@_jit
def deq_row(code, wr, o_):
    """Dequantize one row `wr` (bytes, GGML format `code`) into float32 o_ (serial)."""
    if code == F.Q4_0:
        deq_q4_0(wr, o_)
    elif code == F.Q4_1:
        deq_q4_1(wr, o_)
    elif code == F.Q5_0:
        deq_q5_0(wr, o_)
    elif code == F.Q5_1:
        deq_q5_1(wr, o_)
    elif code == F.Q8_0:
        deq_q8_0(wr, o_)
    elif code == F.Q2_K:
        deq_q2_k(wr, o_)
    elif code == F.Q3_K:
        deq_q3_k(wr, o_)
    elif code == F.Q4_K:
        deq_q4_k(wr, o_)
    elif code == F.Q5_K:
        deq_q5_k(wr, o_)
    elif code == F.Q6_K:
        deq_q6_k(wr, o_)
    elif code == F.F32:
        deq_f32(wr, o_)
    elif code == F.F16:
        deq_f16(wr, o_)
    elif code == F.BF16:
        deq_bf16(wr, o_)
