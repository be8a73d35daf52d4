"""Prompt tokens on two row groups at once, in 512-bit steps (AVX-512 VNNI): `four_tokens_wide`.

The interleaved layout (`interleaved.py`) keeps a block's step p of a group's eight rows in 32
contiguous bytes, each row's four quants in one dword. Two neighbouring groups' step p side by
side in one 512-bit vector want the same four activations in every lane, so `vpdpbusd` takes
them as one broadcast dword: no shuffle for x, and every unpacking instruction serves sixteen
rows, with immediate shifts where the one-token path (`nib_block16`: two steps of one group a
vector) needs variable ones. Four tokens share each block's unpacking, as in `four_tokens`.

Bits: lane r of a group's half gets the integer sums of `_eight_steps` (exact integer adds in
any order give the same integer), then the very intrinsics of `_block_sums` (`dot_add`,
`offset_add`) and `store_rows` at sixteen lanes, the same operations lane by lane. A token's
rows get the bits `token_rows` and `four_tokens` give them, so batch invariance holds whichever
path a row takes (`test_cpu_interleaved.py`).

The 4- and 5-bit block formats (Q4_0, Q4_1, Q5_0, Q5_1: `four_tokens_wide`) and Q4_K
(`four_tokens_wide_k`: each run's steps, scales and order as `_q4_k_superblock4`). Q8_0 has no
unpacking to share; Q6_K measured slower this way (its two columns a step cost two pairs of
half loads; docs/performance.md, twenty-fourth session) and keeps `four_tokens`.
"""
from __future__ import annotations

from llvmlite import ir
from numba import literally, njit
from numba.core import types
from numba.extending import intrinsic, models, register_model

from . import formats as F
from ._rows import XC32, XD
from ._simd import (PREFETCH_BYTES, _dpbusd512, _h2f, _i8, _i16, _i32, _is_i8_array, _is_u8_array, _ptr, _splat, _vb64, _vf,
                    _vi, dot_add, inlined, f32x16, i32x16, offset_add, prefetch, store_rows, vzero)
from .interleaved import Q4_K_LAYOUT

_exact = njit(cache=True, nogil=True)
_steps = ir.ArrayType(_vb64, 8)
_Q4_K_Q, _Q4_K_SCALE, _Q4_K_MINS = Q4_K_LAYOUT.q_at, Q4_K_LAYOUT.scale_at, Q4_K_LAYOUT.mins_at


class WideStepsType(types.Type):
    """A block's eight unpacked steps for two groups, in registers: step p of the first group in
    the low 32 bytes of vector p, of the second in the high 32."""

    def __init__(self):
        super().__init__(name="llamay.WideSteps")


wide_steps_t = WideStepsType()


@register_model(WideStepsType)
class _WideStepsModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _steps)


def _pair(context, builder, sig, args, off, elty, n, first=0):
    """n elements of type elty at w0[off:] then n at w1[off:] (w0, w1 the arrays args[first],
    args[first + 1]) as one vector of 2n."""
    vty = ir.VectorType(elty, n)
    lo = builder.load(_ptr(context, builder, sig.args[first], args[first], off, vty), align=1)
    hi = builder.load(_ptr(context, builder, sig.args[first + 1], args[first + 1], off, vty), align=1)
    return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 2 * n), list(range(2 * n))))


def _steps_value(builder, steps):
    out = ir.Constant(_steps, ir.Undefined)
    for p, v in enumerate(steps):
        out = builder.insert_value(out, v, p)
    return out


@intrinsic
def wide_steps(typingctx, w0, w1, qo, ho, fifth):
    """Steps 0-7 of the 4- or 5-bit block at qo of two groups' tiles (w0, w1): step p < 4 the low
    nibbles of the 32 bytes at qo + 32p, step p + 4 their high ones; with `fifth`, bit p of the
    32 bytes at ho moved to bit 4 of step p's bytes (a dword shift: the kept bit never leaves
    its byte)."""
    if not (_is_u8_array(w0) and _is_u8_array(w1)) or not isinstance(fifth, types.BooleanLiteral):
        return None
    with_fifth = fifth.literal_value

    def codegen(context, builder, sig, args):
        m15 = ir.Constant(_vb64, [15] * 64)
        four = ir.Constant(_vb64, [4] * 64)
        steps = [None] * 8
        for p in range(4):
            off = builder.add(args[2], ir.Constant(args[2].type, 32 * p))
            q = _pair(context, builder, sig, args, off, _i8, 32)
            steps[p] = builder.and_(q, m15)
            steps[p + 4] = builder.and_(builder.lshr(q, four), m15)
        if with_fifth:
            h = builder.bitcast(_pair(context, builder, sig, args, args[3], _i8, 32), _vi)
            bit4 = ir.Constant(_vi, [0x10101010] * 16)
            for p in range(8):
                moved = (builder.shl(h, ir.Constant(_vi, [4 - p] * 16)) if p < 4 else
                         builder.lshr(h, ir.Constant(_vi, [p - 4] * 16)) if p > 4 else h)
                steps[p] = builder.or_(steps[p], builder.bitcast(builder.and_(moved, bit4), _vb64))
        return _steps_value(builder, steps)

    return wide_steps_t(w0, w1, qo, ho, fifth), codegen


@intrinsic
def wide_nibbles(typingctx, w0, w1, qo, shift):
    """A Q4_K run's eight steps for two groups' tiles: step i the nibbles (`shift` 0 or 4) of the
    32 bytes at qo + 32i (`_q4_k_steps`)."""
    if not (_is_u8_array(w0) and _is_u8_array(w1)):
        return None

    def codegen(context, builder, sig, args):
        by = _splat(builder, context.cast(builder, args[3], sig.args[3], types.uint8), _vb64)
        m15 = ir.Constant(_vb64, [15] * 64)
        steps = []
        for i in range(8):
            q = _pair(context, builder, sig, args, builder.add(args[2], ir.Constant(args[2].type, 32 * i)), _i8, 32)
            steps.append(builder.and_(builder.lshr(q, by), m15))
        return _steps_value(builder, steps)

    return wide_steps_t(w0, w1, qo, shift), codegen


@intrinsic
def wide_scale_bytes(typingctx, d, w0, w1, off):
    """d * float(bytes) lane by lane, the eight bytes at w0[off:] then the eight at w1[off:]
    (unsigned): `scale_bytes` on sixteen rows, Q4_K's scales and minima."""
    if d != f32x16 or not (_is_u8_array(w0) and _is_u8_array(w1)):
        return None

    def codegen(context, builder, sig, args):
        v = _pair(context, builder, sig, args, args[3], _i8, 8, first=1)
        return builder.fmul(args[0], builder.uitofp(v, _vf))

    return f32x16(d, w0, w1, off), codegen


@intrinsic
def wide_dot(typingctx, steps, xq, e):
    """The sixteen rows' integer sums of a block against x[e:e+32]: step p times the dword
    x[e+4p:e+4p+4] in every lane, steps 0-3 and 4-7 in two chains, added."""
    if steps != wide_steps_t or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        chains = []
        for half in range(2):
            acc = ir.Constant(_vi, None)
            for p in range(4 * half, 4 * half + 4):
                at = builder.add(args[2], ir.Constant(args[2].type, 4 * p))
                x = builder.load(_ptr(context, builder, sig.args[1], args[1], at, _i32), align=1)
                acc = _dpbusd512(builder, acc, builder.extract_value(args[0], p), _splat(builder, x, _vi))
            chains.append(acc)
        return builder.add(chains[0], chains[1])

    return i32x16(steps, xq, e), codegen


@intrinsic
def wide_halves(typingctx, w0, w1, off):
    """The eight halfs at w0[off:off+16], then the eight at w1[off:off+16], as 16 floats."""
    if not (_is_u8_array(w0) and _is_u8_array(w1)):
        return None

    def codegen(context, builder, sig, args):
        return _h2f(builder, _pair(context, builder, sig, args, args[2], _i16, 8))

    return f32x16(w0, w1, off), codegen


@_exact
def store_four(OUT, t, oo, c0, c1, c2, c3, t0, t1, t2, t3, c):
    """`store_rows` of tokens t..t+3 (eight or sixteen rows from oo): acc + tail * c each."""
    store_rows(OUT[t], oo, c0, t0, c)
    store_rows(OUT[t + 1], oo, c1, t1, c)
    store_rows(OUT[t + 2], oo, c2, t2, c)
    store_rows(OUT[t + 3], oo, c3, t3, c)


@_exact
def _token(steps, d, h, xq, xa, k, acc, tail):
    # one token's part of a block: `_block_sums` of its integer sums, on sixteen rows
    acc = dot_add(acc, wide_dot(steps, xq, k * 32), d, xa[XD, k])
    return acc, offset_add(tail, h, xa[XC32, k])


@_exact
def four_tokens_wide(code, w0, w1, XQ, XA, OUT, t, oo, tile, q, m, hb, c):
    """OUT[t:t+4, oo:oo+16] = the rows of groups w0 and w1 (consecutive: rows oo..oo+15) . the
    int8 rows XQ[t:t+4] (XA their side arrays), for a 4- or 5-bit block format `code` (a
    literal); tile/q/m/hb its `TileLayout` offsets, c its `_offset_scale`."""
    literally(code)
    x0, x1, x2, x3 = XQ[t], XQ[t + 1], XQ[t + 2], XQ[t + 3]
    a0, a1, a2, a3 = XA[t], XA[t + 1], XA[t + 2], XA[t + 3]
    c0, c1, c2, c3 = vzero(), vzero(), vzero(), vzero()
    t0, t1, t2, t3 = vzero(), vzero(), vzero(), vzero()
    for k in range(x0.shape[0] // 32):
        o = k * tile
        prefetch(w0, o + PREFETCH_BYTES)
        prefetch(w1, o + PREFETCH_BYTES)
        if code == F.Q5_0 or code == F.Q5_1:
            steps = wide_steps(w0, w1, o + q, o + hb, True)
        else:
            steps = wide_steps(w0, w1, o + q, o + hb, False)
        d = wide_halves(w0, w1, o)
        h = wide_halves(w0, w1, o + m) if m >= 0 else d
        c0, t0 = _token(steps, d, h, x0, a0, k, c0, t0)
        c1, t1 = _token(steps, d, h, x1, a1, k, c1, t1)
        c2, t2 = _token(steps, d, h, x2, a2, k, c2, t2)
        c3, t3 = _token(steps, d, h, x3, a3, k, c3, t3)
    store_four(OUT, t, oo, c0, c1, c2, c3, t0, t1, t2, t3, c)


@inlined
def _q4_k_wide(w0, w1, o, xs, xas, sb, acc):
    # `_q4_k_superblock4` on two groups: each run's nibbles unpacked once for both and four tokens
    x0, x1, x2, x3 = xs
    a0, a1, a2, a3 = xas
    c0, c1, c2, c3, t0, t1, t2, t3 = acc
    d = wide_halves(w0, w1, o)
    dmin = wide_halves(w0, w1, o + 16)
    for p in range(4):
        kx = sb * 8 + 2 * p
        for half in range(2):
            steps = wide_nibbles(w0, w1, o + _Q4_K_Q + 256 * p, 4 * half)
            s = wide_scale_bytes(d, w0, w1, o + _Q4_K_SCALE + 16 * p + 8 * half)
            e = kx * 32 + 32 * half
            c0 = dot_add(c0, wide_dot(steps, x0, e), s, a0[XD, kx + half])
            c1 = dot_add(c1, wide_dot(steps, x1, e), s, a1[XD, kx + half])
            c2 = dot_add(c2, wide_dot(steps, x2, e), s, a2[XD, kx + half])
            c3 = dot_add(c3, wide_dot(steps, x3, e), s, a3[XD, kx + half])
        mn = o + _Q4_K_MINS + 16 * p
        m0 = wide_scale_bytes(dmin, w0, w1, mn)
        m1 = wide_scale_bytes(dmin, w0, w1, mn + 8)
        t0 = offset_add(offset_add(t0, m0, a0[XC32, kx]), m1, a0[XC32, kx + 1])
        t1 = offset_add(offset_add(t1, m0, a1[XC32, kx]), m1, a1[XC32, kx + 1])
        t2 = offset_add(offset_add(t2, m0, a2[XC32, kx]), m1, a2[XC32, kx + 1])
        t3 = offset_add(offset_add(t3, m0, a3[XC32, kx]), m1, a3[XC32, kx + 1])
    return c0, c1, c2, c3, t0, t1, t2, t3


@_exact
def four_tokens_wide_k(code, w0, w1, XQ, XA, OUT, t, oo, tile, c):
    """`four_tokens_wide` for Q4_K (`code`, a literal): one tile per 256-quant super-block of
    each group, c the format's `_offset_scale`."""
    literally(code)
    xs = (XQ[t], XQ[t + 1], XQ[t + 2], XQ[t + 3])
    xas = (XA[t], XA[t + 1], XA[t + 2], XA[t + 3])
    acc = (vzero(), vzero(), vzero(), vzero(), vzero(), vzero(), vzero(), vzero())
    for sb in range(xs[0].shape[0] // 256):
        o = sb * tile
        for line in range(0, tile, 64):
            prefetch(w0, o + line + PREFETCH_BYTES)
            prefetch(w1, o + line + PREFETCH_BYTES)
        acc = _q4_k_wide(w0, w1, o, xs, xas, sb, acc)
    c0, c1, c2, c3, t0, t1, t2, t3 = acc
    store_four(OUT, t, oo, c0, c1, c2, c3, t0, t1, t2, t3, c)


@_exact
def has_wide(code):
    """Whether format `code` takes `four_tokens_wide` (or `_k`) where AVX-512 VNNI exists."""
    return code == F.Q4_0 or code == F.Q4_1 or code == F.Q5_0 or code == F.Q5_1 or code == F.Q4_K


__all__ = ["four_tokens_wide", "four_tokens_wide_k", "has_wide", "store_four"]
