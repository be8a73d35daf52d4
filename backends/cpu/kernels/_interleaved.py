"""The int8 decode kernel on interleaved weights (`interleaved.py`): eight rows per vector.

A token's dot with rows 8g..8g+7 keeps one f32x8 accumulator whose lane r is row r. Per block
k: eight `vpdpbusd` steps (AVX2: `vpmaddubsw` + `vpmaddwd`), each multiplying four quants of
every row by the same four int8 activations, broadcast; then the integer sums become floats
once, scaled by the eight rows' half scales (one vector conversion) times the activations'
block scale. Offsets (a format's zero point, Q4_0's -8 d, or a minimum) go to a second f32x8,
`tail`, added at the end: out = acc + c * tail, c a power of two or 1, so exact.

With AVX-512 VNNI (`HAS_VNNI_512`) one token's blocks and K-quant runs take their eight steps two
at a time in 512-bit vectors (`nib_block16`, `q8_block16`, `nib_run16`, `q6_k_group16`): four
`vpdpbusd` where eight were, the same integers, so the same bits. One thread from L2 (AMD EPYC,
Zen 5): Q4_0 and Q4_1 +17-24%, Q5_0 +7-8%, Q8_0 +7-11%, Q6_K +20-22%, Q4_K +0-2%
(docs/performance.md, twenty-third session).

Same contract as the grouped kernels (`_grouped.py`): a token's bits do not depend on the other
tokens of the call. Each token runs the same sequence of exact integer dots and explicit
`llvm.fma`s, no fast-math flags, whether alone or in a block of four that shares each block's
unpacking (`four_tokens`: prompts, batched decode); a group's tiles stay in L1
for the next tokens, and a prompt goes in chunks of TOKENS_PER_CHUNK tokens.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from llvmlite import ir
from numba import literally, njit, prange
from numba.core import types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic

from ..sync import first_share, next_share
from . import formats as F
from ._q8 import quantize_rows
from ._rows import XC16, XC32, XD, XI32, deq_row
from ._simd import (HAS_AVX2, HAS_VNNI, HAS_VNNI_512, HINT_BLOCKS_L1, HINT_K_L1, HINT_Q4_K, PREFETCH_BYTES, PREFETCH_BYTES_BLOCKS, PREFETCH_BYTES_K, PREFETCH_BYTES_K_L2, PREFETCH_BYTES_L1,
                    _dpbusd512, _h2f, _i8, _i16, _i32, _is_f32_array, _is_i8_array, _is_u8_array, _llvm_fn, _ptr, _sign_trick,
                    _fma, _splat, _vb32, _vb64, _vf8, _vi, _vi8, _vi32x32, b_or, dot_add, f32x8, i8x32, i32x8, offset_add, prefetch,
                    inlined, prefetch_l2, store_rows, vz8)
from ._wide import four_tokens_wide, four_tokens_wide_k, has_wide, store_four
from .interleaved import LAYOUTS, Q3_K_LAYOUT, Q4_K_LAYOUT, Q5_K_LAYOUT, Q6_K_LAYOUT, ROWS, SUPER_LAYOUTS, block_bytes, tile_bytes, unpack_group, unpack_group_k

_exact = njit(cache=True, nogil=True)
# the K-quant tiles' offsets as plain ints, which Numba freezes into the code
_Q4_K_TILE, _Q4_K_Q, _Q4_K_SCALE, _Q4_K_MINS = Q4_K_LAYOUT.tile, Q4_K_LAYOUT.q_at, Q4_K_LAYOUT.scale_at, Q4_K_LAYOUT.mins_at
_Q6_K_TILE, _Q6_K_QL, _Q6_K_QH, _Q6_K_SCALE = Q6_K_LAYOUT.tile, Q6_K_LAYOUT.q_at, Q6_K_LAYOUT.qh_at, Q6_K_LAYOUT.scale_at
# Q5_K: Q4_K's tile (the same offsets) and the fifth bits after it
_Q5_K_TILE, _Q5_K_QH = Q5_K_LAYOUT.tile, Q5_K_LAYOUT.qh_at
# Q3_K: Q6_K's scale bytes (at the same offset) over its two-bit quants and its high-bit mask
_Q3_K_TILE, _Q3_K_QS, _Q3_K_HM = Q3_K_LAYOUT.tile, Q3_K_LAYOUT.q_at, Q3_K_LAYOUT.qh_at
# Row groups per parallel task: 16 rows, as the other decode kernels' ROWS_PER_TASK.
GROUPS_PER_TASK = 2
# `_tasks`' parallel loop runs its tasks in this many runs (`run_tasks`), consecutive ones on a
# thread under Numba's static split: even enough for any thread count, few enough to cost nothing.
LOOP_PARTS = 64
# A prompt's tokens go in chunks: a chunk's int8 activations (64 x cols bytes) stay in L1/L2 while
# every row group passes over them; all 512 at once spill (T=512 measured 1.0-2.5x slower per flop).
TOKENS_PER_CHUNK = 64


def _load32(context, builder, sig, args, i):
    return builder.load(_ptr(context, builder, sig.args[i], args[i], args[i + 1], _vb32), align=1)


def _bcast4(context, builder, sig, args, i):
    """xq[xo:xo+4] repeated in every 32-bit lane, as 32 bytes."""
    word = builder.load(_ptr(context, builder, sig.args[i], args[i], args[i + 1], _i32), align=1)
    return builder.bitcast(_splat(builder, word, _vi8), _vb32)


def _dpbusd_acc(builder, acc, u, s):
    """acc + (lane i: sum_k u8(u[4i+k]) * s8(s[4i+k])), exactly (u <= 128 where AVX2 pairs them)."""
    if HAS_VNNI:
        fn = _llvm_fn(builder, "llvm.x86.avx512.vpdpbusd.256", _vi8, [_vi8, _vi8, _vi8])
        return builder.call(fn, [acc, builder.bitcast(u, _vi8), builder.bitcast(s, _vi8)])
    if HAS_AVX2:
        vh16 = ir.VectorType(_i16, 16)
        pairs = builder.call(_llvm_fn(builder, "llvm.x86.avx2.pmadd.ub.sw", vh16, [_vb32, _vb32]), [u, s])
        ones = ir.Constant(vh16, [1] * 16)
        return builder.add(acc, builder.call(_llvm_fn(builder, "llvm.x86.avx2.pmadd.wd", _vi8, [vh16, vh16]), [pairs, ones]))
    m = builder.mul(builder.zext(u, _vi32x32), builder.sext(s, _vi32x32), flags=("nsw",))
    parts = [builder.shuffle_vector(m, m, ir.Constant(_vi8, list(range(k, 32, 4)))) for k in range(4)]
    return builder.add(acc, builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3])))


@intrinsic
def iz8(typingctx):
    """All-zero i32x8."""

    def codegen(context, builder, sig, args):
        return ir.Constant(_vi8, None)

    return i32x8(), codegen


@intrinsic
def iadd8(typingctx, a, b):
    """a + b on i32x8 (exact)."""
    if a != i32x8 or b != i32x8:
        return None

    def codegen(context, builder, sig, args):
        return builder.add(args[0], args[1])

    return i32x8(a, b), codegen


@intrinsic
def nib(typingctx, w, off, shift):
    """(w[off:off+32] >> shift) & 15 on byte lanes: one step's 4-bit quants (shift 0 or 4)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = _load32(context, builder, sig, args, 0)
        s = _splat(builder, context.cast(builder, args[2], sig.args[2], types.uint8), _vb32)
        return builder.and_(builder.lshr(v, s), ir.Constant(_vb32, [15] * 32))

    return i8x32(w, off, shift), codegen


def _byte_field(context, builder, sig, args, up):
    """((w[off+l] >> shift) & mask) << up on byte lanes, from args (w, off, shift, mask)."""
    v = _load32(context, builder, sig, args, 0)
    s = _splat(builder, context.cast(builder, args[2], sig.args[2], types.uint8), _vb32)
    mask = _splat(builder, context.cast(builder, args[3], sig.args[3], types.uint8), _vb32)
    return builder.shl(builder.and_(builder.lshr(v, s), mask), up)


@intrinsic
def byte_field(typingctx, w, off, shift, mask, up):
    """((w[off+l] >> shift) & mask) << up for l < 32: a bit field of a step's bytes, put in place
    (Q3_K: its two low bits, up 0, and its high bit, up 2)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        up_by = _splat(builder, context.cast(builder, args[4], sig.args[4], types.uint8), _vb32)
        return _byte_field(context, builder, sig, args, up_by)

    return i8x32(w, off, shift, mask, up), codegen


@intrinsic
def high_bits(typingctx, w, off, shift, mask):
    """((w[off+l] >> shift) & mask) << 4 for l < 32: a step's fifth bit (Q5_0, Q5_1: mask 1) or
    fifth and sixth (Q6_K: mask 3), over the four low bits."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        return _byte_field(context, builder, sig, args, ir.Constant(_vb32, [4] * 32))

    return i8x32(w, off, shift, mask), codegen


@intrinsic
def dpb(typingctx, acc, u, xq, xo):
    """acc + dot4(u, xq[xo:xo+4] in every lane): four unsigned quants of each of 8 rows."""
    if acc != i32x8 or u != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        return _dpbusd_acc(builder, args[0], args[1], _bcast4(context, builder, sig, args, 2))

    return i32x8(acc, u, xq, xo), codegen


@intrinsic
def dpq8(typingctx, acc, w, off, xq, xo):
    """As `dpb` for 32 *signed* quants at w[off:off+32] (Q8_0); a block's sums are its signed
    dot once `q8_dot` has seen them. With VNNI the quants go in as q + 128 (one xor: two
    instructions a step where the sign trick takes six), which `vpdpbusd` dots exactly, as it does
    not saturate. Otherwise |q| against x with q's signs (`_simd._sign_trick`), so AVX2's
    saturating pair sums stay exact (|q| <= 128, |x| <= 127)."""
    if acc != i32x8 or not _is_u8_array(w) or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        q = _load32(context, builder, sig, args, 1)
        x = _bcast4(context, builder, sig, args, 3)
        if HAS_VNNI:
            return _dpbusd_acc(builder, args[0], builder.xor(q, ir.Constant(_vb32, [128] * 32)), x)
        return _dpbusd_acc(builder, args[0], *_sign_trick(builder, q, x))

    return i32x8(acc, w, off, xq, xo), codegen


@intrinsic
def q8_dot(typingctx, dot, xi, k):
    """A Q8_0 block's `dpq8` sums as the dot of its signed quants: with VNNI dot + xi[k] in every
    lane (xi = `xa[XI32]`, -128 times block k's integer sum of x, stored as int32 bits), else dot."""
    if dot != i32x8 or not _is_f32_array(xi):
        return None

    def codegen(context, builder, sig, args):
        if not HAS_VNNI:
            return args[0]
        c = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], _i32))
        return builder.add(args[0], _splat(builder, c, _vi8))

    return i32x8(dot, xi, k), codegen


def _x_pairs(context, builder, sig, args, i):
    """x[e:e+32] (args i, i+1) as four 512-bit operands, k = 0..3: x[e+8k:e+8k+4] in every lane of
    the low half, x[e+8k+4:e+8k+8] in the high half, to dot two 256-bit steps at once."""
    xv = builder.load(_ptr(context, builder, sig.args[i], args[i], args[i + 1], _vi8), align=1)
    return [builder.shuffle_vector(xv, xv, ir.Constant(_vi, [2 * k] * 8 + [2 * k + 1] * 8)) for k in range(4)]


def _halves_sum(builder, v):
    """The low and high 256-bit halves of a 512-bit sum added: the eight rows' sums."""
    lo = builder.shuffle_vector(v, v, ir.Constant(_vi8, list(range(8))))
    hi = builder.shuffle_vector(v, v, ir.Constant(_vi8, list(range(8, 16))))
    return builder.add(lo, hi)


def _two_dots(builder, u0, x0, u1, x1):
    """u0 . x0 + u1 . x1 in 32-bit lanes: two chained 512-bit `vpdpbusd` from zero."""
    return _dpbusd512(builder, _dpbusd512(builder, ir.Constant(_vi, None), u0, x0), u1, x1)


def _shift_dwords(builder, v, by):
    """v's 32-bit lanes shifted left by `by` bits (right for a negative `by`): moves a bit field
    within its byte when it does not cross the byte's edge."""
    if by > 0:
        return builder.shl(v, ir.Constant(_vi, [by] * 16))
    return builder.lshr(v, ir.Constant(_vi, [-by] * 16)) if by < 0 else v


def _load64(context, builder, sig, args, i, extra=0, at=None):
    """The 64 bytes at array args[i], from index args[at] (default args[i + 1]) + `extra`."""
    j = i + 1 if at is None else at
    p = _ptr(context, builder, sig.args[i], args[i], builder.add(args[j], ir.Constant(args[j].type, extra)), _vb64)
    return builder.load(p, align=1)


@intrinsic
def nib_block16(typingctx, w, qo, ho, xq, e, fifth):
    """A 4- or 5-bit block's integer sums in 512-bit steps (AVX-512 VNNI): the integers
    `_eight_steps` (and `_paired_steps`) give, from four `vpdpbusd` where they take eight. Two
    256-bit steps share each vector: steps p, p + 1 are the 64 bytes at w[qo + 32p:], their low
    nibbles, and steps p + 4, p + 5 their high ones; with `fifth` (Q5_0, Q5_1) step p's fifth bit
    is bit p of the bytes at w[ho:ho+32], moved to bit 4 by a dword shift (no bit crosses a byte:
    only bit 4 is kept)."""
    if not _is_u8_array(w) or not _is_i8_array(xq) or not isinstance(fifth, types.BooleanLiteral):
        return None
    with_fifth = fifth.literal_value

    def codegen(context, builder, sig, args):
        x0, x1, x2, x3 = _x_pairs(context, builder, sig, args, 3)
        q01 = _load64(context, builder, sig, args, 0)
        q23 = _load64(context, builder, sig, args, 0, 64)
        m15 = ir.Constant(_vb64, [15] * 64)
        four = ir.Constant(_vb64, [4] * 64)
        lo01, lo23 = builder.and_(q01, m15), builder.and_(q23, m15)
        hi01, hi23 = builder.and_(builder.lshr(q01, four), m15), builder.and_(builder.lshr(q23, four), m15)
        if with_fifth:
            h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[2], _vi8), align=1)
            h = builder.shuffle_vector(h, h, ir.Constant(_vi, list(range(8)) * 2))
            bit4 = ir.Constant(_vi, [0x10101010] * 16)

            def fifth_bits(shifted):
                return builder.bitcast(builder.and_(shifted, bit4), _vb64)

            def shifts(a, b):
                return ir.Constant(_vi, [a] * 8 + [b] * 8)

            # step p's bit p (p < 4) up to bit 4; step p + 4's bit p + 4 down to it
            lo01 = builder.or_(lo01, fifth_bits(builder.shl(h, shifts(4, 3))))
            lo23 = builder.or_(lo23, fifth_bits(builder.shl(h, shifts(2, 1))))
            hi01 = builder.or_(hi01, fifth_bits(builder.lshr(h, shifts(0, 1))))
            hi23 = builder.or_(hi23, fifth_bits(builder.lshr(h, shifts(2, 3))))
        a = _two_dots(builder, lo01, x0, lo23, x1)
        b = _two_dots(builder, hi01, x2, hi23, x3)
        return _halves_sum(builder, builder.add(a, b))

    return i32x8(w, qo, ho, xq, e, fifth), codegen


@intrinsic
def nib_run16(typingctx, w, qo, xq, e, shift):
    """A Q4_K run's integer sums in 512-bit steps: the nibbles (`shift` 0 or 4, as `nib`) of the
    256 bytes at w[qo:], steps 2i, 2i + 1 in the 64 bytes at qo + 64i, against x[e:e+32]; the
    integers `_eight_steps` gives a run (`_q4_k_steps`), from four `vpdpbusd` where it takes eight."""
    if not _is_u8_array(w) or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xs = _x_pairs(context, builder, sig, args, 2)
        m15 = ir.Constant(_vb64, [15] * 64)
        by = _splat(builder, context.cast(builder, args[4], sig.args[4], types.uint8), _vb64)
        ns = [builder.and_(builder.lshr(_load64(context, builder, sig, args, 0, 64 * i), by), m15) for i in range(4)]
        a = _two_dots(builder, ns[0], xs[0], ns[1], xs[1])
        b = _two_dots(builder, ns[2], xs[2], ns[3], xs[3])
        return _halves_sum(builder, builder.add(a, b))

    return i32x8(w, qo, xq, e, shift), codegen


@intrinsic
def nib5_run16(typingctx, w, qo, ho, xq, e, shift, run):
    """`nib_run16` for a Q5_K run (`run` 0-7): each step's nibbles with the run's fifth bits over
    them, bit `run` of the 256 bytes at w[ho:] (steps 2i, 2i + 1 at ho + 64i), moved to bit 0 and
    then 4 by dword shifts (it stays in its byte); the integers `_eight_steps` gives the run."""
    if not _is_u8_array(w) or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xs = _x_pairs(context, builder, sig, args, 3)
        m15 = ir.Constant(_vb64, [15] * 64)
        bit0 = ir.Constant(_vi, [0x01010101] * 16)
        by = _splat(builder, context.cast(builder, args[5], sig.args[5], types.uint8), _vb64)
        down = _splat(builder, context.cast(builder, args[6], sig.args[6], types.uint32), _vi)
        units = []
        for i in range(4):
            q = builder.and_(builder.lshr(_load64(context, builder, sig, args, 0, 64 * i), by), m15)
            h = builder.bitcast(_load64(context, builder, sig, args, 0, 64 * i, at=2), _vi)
            h = builder.shl(builder.and_(builder.lshr(h, down), bit0), ir.Constant(_vi, [4] * 16))
            units.append(builder.or_(q, builder.bitcast(h, _vb64)))
        a = _two_dots(builder, units[0], xs[0], units[1], xs[1])
        b = _two_dots(builder, units[2], xs[2], units[3], xs[3])
        return _halves_sum(builder, builder.add(a, b))

    return i32x8(w, qo, ho, xq, e, shift, run), codegen


def _group16(context, builder, sig, args, g, unit):
    """The summed dots of steps 4g..4g+3 of a K-quant run in two 512-bit steps (`q6_k_group16`,
    `q3_k_group16`): step pair i (0, 1) is `unit(q, h)` of the 64 bytes at w[args[1] + 128g + 64i:]
    and at w[args[2] + 128g + 64i:], against x pair 2g + i of x[args[4]:] (args 0, 1, 2, 3, 4: w,
    quant offset, high-bit offset, xq, e)."""
    xs = _x_pairs(context, builder, sig, args, 3)[2 * g:2 * g + 2]
    units = [unit(_load64(context, builder, sig, args, 0, 128 * g + 64 * i),
                  _load64(context, builder, sig, args, 0, 128 * g + 64 * i, at=2)) for i in range(2)]
    return _halves_sum(builder, _two_dots(builder, units[0], xs[0], units[1], xs[1]))


@intrinsic
def q6_k_group16(typingctx, w, lo, hi, xq, e, t, group):
    """Steps 4g..4g+3 (g = `group`) of a Q6_K run in 512-bit steps: low four bits the nibbles
    (shift 4 (t >> 1)) of the 128 bytes at w[lo + 128g:], the two high bits bits 2t, 2t + 1 of
    those at w[hi + 128g:], moved to bits 4-5 by a dword shift (they stay in their byte);
    against x[e + 16g:e + 16g + 16]: the integers `_eight_steps` gives as a or b."""
    if (not _is_u8_array(w) or not _is_i8_array(xq) or not isinstance(t, types.IntegerLiteral)
            or not isinstance(group, types.IntegerLiteral)):
        return None
    tt, g = t.literal_value, group.literal_value

    def codegen(context, builder, sig, args):
        m15 = ir.Constant(_vb64, [15] * 64)
        bits45 = ir.Constant(_vi, [0x30303030] * 16)

        def unit(q, h):
            if tt >= 2:
                q = builder.lshr(q, ir.Constant(_vb64, [4] * 64))
            h = _shift_dwords(builder, builder.bitcast(h, _vi), 4 - 2 * tt)
            return builder.or_(builder.and_(q, m15), builder.bitcast(builder.and_(h, bits45), _vb64))

        return _group16(context, builder, sig, args, g, unit)

    return i32x8(w, lo, hi, xq, e, t, group), codegen


@intrinsic
def q3_k_group16(typingctx, w, qs, hm, xq, e, h, t, group):
    """Steps 4g..4g+3 (g = `group`) of Q3_K run 4h + t in 512-bit steps, as `q6_k_group16`: the
    two bits 2t of the 128 bytes at w[qs + 128g:], over them bit 4h + t of those at
    w[hm + 128g:] moved to bit 2 by a dword shift (it stays in its byte); against
    x[e + 16g:e + 16g + 16]: the integers `_eight_steps` gives as a or b."""
    if (not _is_u8_array(w) or not _is_i8_array(xq) or not isinstance(h, types.IntegerLiteral)
            or not isinstance(t, types.IntegerLiteral) or not isinstance(group, types.IntegerLiteral)):
        return None
    tt, bit, g = t.literal_value, 4 * h.literal_value + t.literal_value, group.literal_value

    def codegen(context, builder, sig, args):
        low2 = ir.Constant(_vi, [0x03030303] * 16)
        bit2 = ir.Constant(_vi, [0x04040404] * 16)

        def unit(q, m):
            q = builder.bitcast(q, _vi)
            if tt:
                q = builder.lshr(q, ir.Constant(_vi, [2 * tt] * 16))
            m = _shift_dwords(builder, builder.bitcast(m, _vi), 2 - bit)
            return builder.bitcast(builder.or_(builder.and_(q, low2), builder.and_(m, bit2)), _vb64)

        return _group16(context, builder, sig, args, g, unit)

    return i32x8(w, qs, hm, xq, e, h, t, group), codegen


@intrinsic
def q8_block16(typingctx, w, qo, xq, e):
    """A Q8_0 block's `dpq8` sums (eight steps at w[qo:qo+256]) in four 512-bit `vpdpbusd`, the
    quants as q + 128 as there: the integers `q8_dot` takes."""
    if not _is_u8_array(w) or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xs = _x_pairs(context, builder, sig, args, 2)
        flip = ir.Constant(_vb64, [128] * 64)
        qs = [builder.xor(_load64(context, builder, sig, args, 0, 64 * p), flip) for p in range(4)]
        a = _two_dots(builder, qs[0], xs[0], qs[2], xs[2])
        b = _two_dots(builder, qs[1], xs[1], qs[3], xs[3])
        return _halves_sum(builder, builder.add(a, b))

    return i32x8(w, qo, xq, e), codegen


def _halves8(context, builder, sig, args, i):
    """Eight halfs at w[off:off+16] (args i, i+1) as f32x8."""
    h = builder.load(_ptr(context, builder, sig.args[i], args[i], args[i + 1], ir.VectorType(_i16, 8)), align=1)
    return _h2f(builder, h)


@intrinsic
def scale_add(typingctx, acc, dot, w, off, dx):
    """fma(float(dot), d * dx, acc) with d the eight half scales at w[off:off+16]."""
    if acc != f32x8 or dot != i32x8 or not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        d = _halves8(context, builder, sig, args, 2)
        s = builder.fmul(d, _splat(builder, context.cast(builder, args[4], sig.args[4], types.float32), _vf8))
        return _fma(builder, builder.sitofp(args[1], _vf8), s, args[0])

    return f32x8(acc, dot, w, off, dx), codegen


@intrinsic
def halves_add(typingctx, acc, w, off, c):
    """fma(h, c, acc) with h the eight halfs at w[off:off+16]: a block's offsets times sum(x)."""
    if acc != f32x8 or not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        h = _halves8(context, builder, sig, args, 1)
        c = _splat(builder, context.cast(builder, args[3], sig.args[3], types.float32), _vf8)
        return _fma(builder, h, c, args[0])

    return f32x8(acc, w, off, c), codegen


@intrinsic
def halves(typingctx, w, off):
    """The eight halfs at w[off:off+16] as f32x8 (eight rows' scales)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        return _halves8(context, builder, sig, args, 0)

    return f32x8(w, off), codegen


@intrinsic
def scale_bytes(typingctx, d, w, off, signed):
    """d * float(w[off:off+8]) lane by lane: eight rows' K-quant scales (bytes, int8 if `signed`);
    exact, as a half times a 6- or 8-bit integer fits float32's mantissa."""
    if d != f32x8 or not _is_u8_array(w) or not isinstance(signed, types.BooleanLiteral):
        return None
    as_signed = signed.literal_value

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], ir.VectorType(_i8, 8)), align=1)
        f = builder.sitofp(v, _vf8) if as_signed else builder.uitofp(v, _vf8)
        return builder.fmul(args[0], f)

    return f32x8(d, w, off, signed), codegen


@_exact
def _offset_scale(code):
    # out = acc + c * tail: the zero point of a signed format in units of d (tail sums d * sum x),
    # 1 where tail sums the minima, 0 where there is no offset (Q8_0's quants are signed)
    if code == F.Q4_0:
        return np.float32(-8.0)
    if code == F.Q5_0:
        return np.float32(-16.0)
    if code == F.Q8_0:
        return np.float32(0.0)
    if code == F.Q4_K or code == F.Q5_K:
        return np.float32(-1.0)
    if code == F.Q6_K:
        return np.float32(-32.0)
    if code == F.Q3_K:
        return np.float32(-4.0)
    return np.float32(1.0)


@_exact
def token_rows(code, wg, xq, xa, out, oo, tile, q, m, hb):
    """out[oo:oo+8] = the eight rows of group `wg` (one interleaved row) . x, x given as int8
    (`quantize_q8`'s xq, xa); `code` a literal, tile/q/m/hb the format's `TileLayout` offsets."""
    literally(code)
    nb = xq.shape[0] // 32
    acc = vz8()
    tail = vz8()
    for k in range(nb):
        o = k * tile
        _hint_tile(code, wg, o)
        e = k * 32
        if code == F.Q8_0:
            if HAS_VNNI_512:
                d = q8_block16(wg, o + q, xq, e)
            else:
                a = iz8()
                b = iz8()
                for p in range(4):
                    a = dpq8(a, wg, o + q + 64 * p, xq, e + 8 * p)
                    b = dpq8(b, wg, o + q + 64 * p + 32, xq, e + 8 * p + 4)
                d = iadd8(a, b)
            acc = scale_add(acc, q8_dot(d, xa[XI32], k), wg, o, xa[XD, k])
        elif HAS_VNNI_512:
            if code == F.Q5_0 or code == F.Q5_1:
                d = nib_block16(wg, o + q, o + hb, xq, e, True)
            else:
                d = nib_block16(wg, o + q, o + hb, xq, e, False)
            acc, tail = _block_sums(d, iz8(), wg, o, m, xa, k, acc, tail)
        else:
            l0, l1, l2, l3, h0, h1, h2, h3 = _block_steps(code, wg, o, q, hb)
            if code == F.Q4_0 or code == F.Q4_1:
                a, b = _paired_steps(l0, l1, l2, l3, h0, h1, h2, h3, xq, e)
            else:
                a, b = _eight_steps(l0, l1, l2, l3, h0, h1, h2, h3, xq, e)
            acc, tail = _block_sums(a, b, wg, o, m, xa, k, acc, tail)
    store_rows(out, oo, acc, tail, _offset_scale(code))


@_exact
def hint_lines(code):
    """Hints `token_rows` gives each tile, 64 bytes apart: with one tile after another, enough
    that no line goes unhinted (tiles: Q8_0 272 bytes, the 4- and 5-bit formats 144-192)."""
    return 5 if code == F.Q8_0 else 3


@_exact
def _hint_tile(code, wg, o):
    # every line of the tile PREFETCH_BYTES_BLOCKS past the one at `o` into L2, and for the 4- and
    # 5-bit formats every line of the tile PREFETCH_BYTES_L1 past it into L1 (by then in L2). One hint
    # a tile into L1, as before, left the other lines to the hardware's prefetcher and held L1's
    # miss buffers on memory; the L2 hints took whole decode +7-11% on qwen2.5-coder:0.5b and
    # +6-12% on gemma3:270m, the L1 ones Q5_0 +6% more (docs/performance.md, twenty-first and
    # twenty-second sessions, Intel Xeon; on AMD's Zen the L1 ones cost more than they gave:
    # `HINT_BLOCKS_L1`)
    for j in range(hint_lines(code)):
        prefetch_l2(wg, o + PREFETCH_BYTES_BLOCKS + 64 * j)
    if code != F.Q8_0 and HINT_BLOCKS_L1:
        for j in range(hint_lines(code)):
            prefetch(wg, o + PREFETCH_BYTES_L1 + 64 * j)


@_exact
def _paired_steps(u0, u1, u2, u3, v0, v1, v2, v3, xq, e):
    # `_eight_steps`' sums (the same integers: any order is exact) in two chains of two dots a
    # half, not one of four: a 4-bit block alone has few instructions a step and waited on the
    # dots' latency (one token, Q4_1: 5-7% less time a block, smollm2's decode 1-4% faster);
    # formats with more to unpack a step, and four tokens at once, measured no better this way
    a = iadd8(dpb(dpb(iz8(), u0, xq, e), u1, xq, e + 4), dpb(dpb(iz8(), u2, xq, e + 8), u3, xq, e + 12))
    b = iadd8(dpb(dpb(iz8(), v0, xq, e + 16), v1, xq, e + 20), dpb(dpb(iz8(), v2, xq, e + 24), v3, xq, e + 28))
    return a, b


@_exact
def _eight_steps(u0, u1, u2, u3, v0, v1, v2, v3, xq, e):
    # a block's (or run's) eight unpacked steps against x[e:e+32]: the exact integer sums of
    # steps 0-3 and 4-7, as the one-token kernels chain them
    a = dpb(dpb(dpb(dpb(iz8(), u0, xq, e), u1, xq, e + 4), u2, xq, e + 8), u3, xq, e + 12)
    b = dpb(dpb(dpb(dpb(iz8(), v0, xq, e + 16), v1, xq, e + 20), v2, xq, e + 24), v3, xq, e + 28)
    return a, b


@_exact
def _step_quants(code, wg, o, q, hb, p):
    # steps p and p + 4 of a 4- or 5-bit block as unsigned quants: nibbles, and the fifth bit
    lo = nib(wg, o + q + 32 * p, 0)
    hi = nib(wg, o + q + 32 * p, 4)
    if code == F.Q5_0 or code == F.Q5_1:
        lo = b_or(lo, high_bits(wg, o + hb, p, 1))
        hi = b_or(hi, high_bits(wg, o + hb, p + 4, 1))
    return lo, hi


@_exact
def _block_steps(code, wg, o, q, hb):
    # the eight steps of a 4- or 5-bit block: (steps 0-3, steps 4-7)
    l0, h0 = _step_quants(code, wg, o, q, hb, 0)
    l1, h1 = _step_quants(code, wg, o, q, hb, 1)
    l2, h2 = _step_quants(code, wg, o, q, hb, 2)
    l3, h3 = _step_quants(code, wg, o, q, hb, 3)
    return l0, l1, l2, l3, h0, h1, h2, h3


@_exact
def _block_token(l0, l1, l2, l3, h0, h1, h2, h3, wg, o, m, xq, xa, k, acc, tail):
    # one token's part of a 4- or 5-bit block whose steps are unpacked, for four tokens at once;
    # one alone (`token_rows`) computes the same integers (for the 4-bit formats by
    # `_paired_steps`) and scales them by `_block_sums` as here, so gets the same bits
    a, b = _eight_steps(l0, l1, l2, l3, h0, h1, h2, h3, xq, k * 32)
    return _block_sums(a, b, wg, o, m, xa, k, acc, tail)


@_exact
def _block_sums(a, b, wg, o, m, xa, k, acc, tail):
    # a 4- or 5-bit block's integer sums a + b scaled into acc, its offsets times x's sum into tail
    acc = scale_add(acc, iadd8(a, b), wg, o, xa[XD, k])
    tail = halves_add(tail, wg, o + m if m >= 0 else o, xa[XC32, k])
    return acc, tail


@_exact
def _q4_k_superblock(code, wg, o, xq, xa, sb, acc, tail):
    # runs 2p (low nibbles) and 2p+1 (high) share a 32-byte word column; x blocks kx, kx + 1
    # (left as loops: written out run by run as `_q6_k_superblock`, 1 thread from L2 read
    # 27-28 GB/s against the loops' 30-31). Q5_K (`code`, a literal) is Q4_K with a fifth bit
    # over each nibble: the same tile, scales, minima and order.
    literally(code)
    d = halves(wg, o)
    dmin = halves(wg, o + 16)
    for p in range(4):
        kx = sb * 8 + 2 * p
        for half in range(2):
            s = scale_bytes(d, wg, o + _Q4_K_SCALE + 16 * p + 8 * half, False)
            e = kx * 32 + 32 * half
            if HAS_VNNI_512 and code == F.Q5_K:  # the run's steps two at a time: the same integers
                dot = nib5_run16(wg, o + _Q4_K_Q + 256 * p, o + _Q5_K_QH, xq, e, 4 * half, 2 * p + half)
                acc = dot_add(acc, dot, s, xa[XD, kx + half])
            elif HAS_VNNI_512:
                acc = dot_add(acc, nib_run16(wg, o + _Q4_K_Q + 256 * p, xq, e, 4 * half), s, xa[XD, kx + half])
            else:
                u0, u1, u2, u3, v0, v1, v2, v3 = _q4_k_steps(code, wg, o, p, half)
                acc = _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, xq, e, xa[XD, kx + half], s, acc)
        tail = _q4_k_tail(wg, o, dmin, p, xa, kx, tail)
    return acc, tail


@_exact
def _q4_k_steps(code, wg, o, p, half):
    # run 2p + half's eight steps: its nibbles (low or high) of word columns qo and qo + 128, and
    # for Q5_K (`code`) the run's fifth bits over them (bit 2p + half of the qh words)
    qo = o + _Q4_K_Q + 256 * p
    sh = 4 * half
    if code == F.Q5_K:
        ho = o + _Q5_K_QH
        j = 2 * p + half
        return (b_or(nib(wg, qo, sh), high_bits(wg, ho, j, 1)),
                b_or(nib(wg, qo + 32, sh), high_bits(wg, ho + 32, j, 1)),
                b_or(nib(wg, qo + 64, sh), high_bits(wg, ho + 64, j, 1)),
                b_or(nib(wg, qo + 96, sh), high_bits(wg, ho + 96, j, 1)),
                b_or(nib(wg, qo + 128, sh), high_bits(wg, ho + 128, j, 1)),
                b_or(nib(wg, qo + 160, sh), high_bits(wg, ho + 160, j, 1)),
                b_or(nib(wg, qo + 192, sh), high_bits(wg, ho + 192, j, 1)),
                b_or(nib(wg, qo + 224, sh), high_bits(wg, ho + 224, j, 1)))
    return (nib(wg, qo, sh), nib(wg, qo + 32, sh), nib(wg, qo + 64, sh), nib(wg, qo + 96, sh),
            nib(wg, qo + 128, sh), nib(wg, qo + 160, sh), nib(wg, qo + 192, sh), nib(wg, qo + 224, sh))


@_exact
def _q4_k_tail(wg, o, dmin, p, xa, kx, tail):
    # the minima of runs 2p and 2p + 1 times x's sums
    mn = o + _Q4_K_MINS + 16 * p
    tail = offset_add(tail, scale_bytes(dmin, wg, mn, False), xa[XC32, kx])
    return offset_add(tail, scale_bytes(dmin, wg, mn + 8, False), xa[XC32, kx + 1])


@inlined
def _q6_k_superblock(code, wg, o, xq, xa, sb, acc, tail):
    # run j = 4h + t: low four bits in ql chunk 2h + (t & 1) (nibble t >> 1), two high bits at
    # 2t of qh chunk h; 16-quant groups 2j (steps 0-3) and 2j + 1 (steps 4-7). Written out run
    # by run, not as loops over h and t: with them constants the shifts and masks fold into
    # immediates (the loops' were variable shifts and masks built at run time). 4864 columns,
    # from L2: 17 -> 26-27 GB/s on one thread, 32-33 -> 51-52 on two; from memory 23 -> 25-26.
    # Q3_K (`code`) runs the same way: its runs, groups and scales sit where Q6_K's do.
    d = halves(wg, o)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 0, 0, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 0, 1, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 0, 2, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 0, 3, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 1, 0, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 1, 1, acc, tail)
    acc, tail = _q6_k_one(code, wg, o, xq, xa, sb, d, 1, 2, acc, tail)
    return _q6_k_one(code, wg, o, xq, xa, sb, d, 1, 3, acc, tail)


@_exact
def _q6_k_one(code, wg, o, xq, xa, sb, d, h, t, acc, tail):
    # run 4h + t of a Q6_K (or Q3_K) super-block for one token
    literally(t)  # the wide steps' shifts are constants of t
    literally(h)  # Q3_K's wide steps' mask bit is a constant of h and t
    # the steps two at a time: the same integers a, b, scaled as `_q6_k_run` does
    if HAS_VNNI_512 and code == F.Q3_K:
        kx = sb * 8 + 4 * h + t
        qs, hm = o + _Q3_K_QS + 256 * h, o + _Q3_K_HM
        s0, s1 = _q6_k_scales(wg, o, d, 4 * h + t)
        return _q6_k_sums(q3_k_group16(wg, qs, hm, xq, kx * 32, h, t, 0), q3_k_group16(wg, qs, hm, xq, kx * 32, h, t, 1),
                          xa, kx, s0, s1, acc, tail)
    if HAS_VNNI_512 and code == F.Q6_K:
        kx = sb * 8 + 4 * h + t
        lo, hi, _ = _q6_k_columns(o, h, t)
        s0, s1 = _q6_k_scales(wg, o, d, 4 * h + t)
        return _q6_k_sums(q6_k_group16(wg, lo, hi, xq, kx * 32, t, 0), q6_k_group16(wg, lo, hi, xq, kx * 32, t, 1),
                          xa, kx, s0, s1, acc, tail)
    (u0, u1, u2, u3, v0, v1, v2, v3), s0, s1 = _q6_k_unpacked(code, wg, o, d, h, t)
    return _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xq, xa, sb * 8 + 4 * h + t, s0, s1, acc, tail)


@_exact
def _q6_k_unpacked(code, wg, o, d, h, t):
    # run 4h + t's eight steps (`_q6_k_steps`) and the scales of its two 16-quant groups
    s0, s1 = _q6_k_scales(wg, o, d, 4 * h + t)
    return _q6_k_steps(code, wg, o, h, t), s0, s1


@_exact
def _q6_k_scales(wg, o, d, j):
    # run j's two 16-quant groups' scales
    return scale_bytes(d, wg, o + _Q6_K_SCALE + 16 * j, True), scale_bytes(d, wg, o + _Q6_K_SCALE + 16 * j + 8, True)


@_exact
def _q6_k_columns(o, h, t):
    # run 4h + t's column of low four bits (ql), of two high bits (qh), and its nibble's shift
    return o + _Q6_K_QL + 256 * (2 * h + (t & 1)), o + _Q6_K_QH + 256 * h, 4 * (t >> 1)


@_exact
def _q6_k_steps(code, wg, o, h, t):
    # run 4h + t's eight steps as unsigned six-bit quants; Q3_K's (`code`) as unsigned three-bit
    # ones: two bits 2t of its quant words 8h.., over them bit 4h + t of its mask words
    if code == F.Q3_K:
        qs = o + _Q3_K_QS + 256 * h
        hm = o + _Q3_K_HM
        j = 4 * h + t
        return (b_or(byte_field(wg, qs, 2 * t, 3, 0), byte_field(wg, hm, j, 1, 2)),
                b_or(byte_field(wg, qs + 32, 2 * t, 3, 0), byte_field(wg, hm + 32, j, 1, 2)),
                b_or(byte_field(wg, qs + 64, 2 * t, 3, 0), byte_field(wg, hm + 64, j, 1, 2)),
                b_or(byte_field(wg, qs + 96, 2 * t, 3, 0), byte_field(wg, hm + 96, j, 1, 2)),
                b_or(byte_field(wg, qs + 128, 2 * t, 3, 0), byte_field(wg, hm + 128, j, 1, 2)),
                b_or(byte_field(wg, qs + 160, 2 * t, 3, 0), byte_field(wg, hm + 160, j, 1, 2)),
                b_or(byte_field(wg, qs + 192, 2 * t, 3, 0), byte_field(wg, hm + 192, j, 1, 2)),
                b_or(byte_field(wg, qs + 224, 2 * t, 3, 0), byte_field(wg, hm + 224, j, 1, 2)))
    lo, hi, sh = _q6_k_columns(o, h, t)
    return (b_or(nib(wg, lo, sh), high_bits(wg, hi, 2 * t, 3)),
            b_or(nib(wg, lo + 32, sh), high_bits(wg, hi + 32, 2 * t, 3)),
            b_or(nib(wg, lo + 64, sh), high_bits(wg, hi + 64, 2 * t, 3)),
            b_or(nib(wg, lo + 96, sh), high_bits(wg, hi + 96, 2 * t, 3)),
            b_or(nib(wg, lo + 128, sh), high_bits(wg, hi + 128, 2 * t, 3)),
            b_or(nib(wg, lo + 160, sh), high_bits(wg, hi + 160, 2 * t, 3)),
            b_or(nib(wg, lo + 192, sh), high_bits(wg, hi + 192, 2 * t, 3)),
            b_or(nib(wg, lo + 224, sh), high_bits(wg, hi + 224, 2 * t, 3)))


@_exact
def _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, xq, e, dx, s, acc):
    # one token's part of a Q4_K run (`_q4_k_steps`): its dots, then the scaled sum; one token
    # alone and four together both run exactly this
    a, b = _eight_steps(u0, u1, u2, u3, v0, v1, v2, v3, xq, e)
    return dot_add(acc, iadd8(a, b), s, dx)


@inlined
def _q4_k_superblock4(code, wg, o, x0, x1, x2, x3, a0, a1, a2, a3, sb, c0, c1, c2, c3, t0, t1, t2, t3):
    # `_q4_k_superblock` for four tokens (Q4_K or Q5_K: `code`), each step unpacked once; every
    # chain (a token's acc, its tail) sees the same operations in the same order as alone
    d = halves(wg, o)
    dmin = halves(wg, o + 16)
    for p in range(4):
        kx = sb * 8 + 2 * p
        for half in range(2):
            u0, u1, u2, u3, v0, v1, v2, v3 = _q4_k_steps(code, wg, o, p, half)
            s = scale_bytes(d, wg, o + _Q4_K_SCALE + 16 * p + 8 * half, False)
            e = kx * 32 + 32 * half
            c0 = _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, x0, e, a0[XD, kx + half], s, c0)
            c1 = _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, x1, e, a1[XD, kx + half], s, c1)
            c2 = _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, x2, e, a2[XD, kx + half], s, c2)
            c3 = _q4_k_half(u0, u1, u2, u3, v0, v1, v2, v3, x3, e, a3[XD, kx + half], s, c3)
        t0 = _q4_k_tail(wg, o, dmin, p, a0, kx, t0)
        t1 = _q4_k_tail(wg, o, dmin, p, a1, kx, t1)
        t2 = _q4_k_tail(wg, o, dmin, p, a2, kx, t2)
        t3 = _q4_k_tail(wg, o, dmin, p, a3, kx, t3)
    return c0, c1, c2, c3, t0, t1, t2, t3


@_exact
def _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xq, xa, kx, s0, s1, acc, tail):
    # one token's part of a Q6_K run (x block kx) whose steps (u: 16-quant group 2j, v: 2j + 1)
    # are unpacked; one token alone and four together both run exactly this
    a, b = _eight_steps(u0, u1, u2, u3, v0, v1, v2, v3, xq, kx * 32)
    return _q6_k_sums(a, b, xa, kx, s0, s1, acc, tail)


@_exact
def _q6_k_sums(a, b, xa, kx, s0, s1, acc, tail):
    # a Q6_K run's integer sums a, b (its two 16-quant groups) scaled into acc, offsets into tail
    acc = dot_add(acc, a, s0, xa[XD, kx])
    acc = dot_add(acc, b, s1, xa[XD, kx])
    tail = offset_add(tail, s0, xa[XC16, 2 * kx])
    return acc, offset_add(tail, s1, xa[XC16, 2 * kx + 1])


@inlined
def _q6_k_superblock4(code, wg, o, x0, x1, x2, x3, a0, a1, a2, a3, sb, c0, c1, c2, c3, t0, t1, t2, t3):
    # `_q6_k_superblock` for four tokens: each run's six-bit quants are assembled once, not per
    # token (most of a Q6_K run's instructions), so prompts go ~3x fewer instructions per dot;
    # written out run by run as there (the tokens' x and accumulators go as tuples)
    d = halves(wg, o)
    xs, xas, acc = (x0, x1, x2, x3), (a0, a1, a2, a3), (c0, c1, c2, c3, t0, t1, t2, t3)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 0, 0, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 0, 1, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 0, 2, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 0, 3, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 1, 0, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 1, 1, acc)
    acc = _q6_k_one4(code, wg, o, xs, xas, sb, d, 1, 2, acc)
    return _q6_k_one4(code, wg, o, xs, xas, sb, d, 1, 3, acc)


@inlined
def _q6_k_one4(code, wg, o, xs, xas, sb, d, h, t, acc):
    # run 4h + t of a Q6_K (or Q3_K) super-block for four tokens
    kx = sb * 8 + 4 * h + t
    (u0, u1, u2, u3, v0, v1, v2, v3), s0, s1 = _q6_k_unpacked(code, wg, o, d, h, t)
    c0, c1, c2, c3, t0, t1, t2, t3 = acc
    c0, t0 = _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xs[0], xas[0], kx, s0, s1, c0, t0)
    c1, t1 = _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xs[1], xas[1], kx, s0, s1, c1, t1)
    c2, t2 = _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xs[2], xas[2], kx, s0, s1, c2, t2)
    c3, t3 = _q6_k_run(u0, u1, u2, u3, v0, v1, v2, v3, xs[3], xas[3], kx, s0, s1, c3, t3)
    return c0, c1, c2, c3, t0, t1, t2, t3


@_exact
def four_tokens(code, wg, XQ, XA, OUT, t, oo, tile, q, m, hb):
    """`token_rows` / `token_rows_k` for tokens t..t+3 at once (any format but Q8_0, whose quants
    are read as they are: nothing to share). Each block or super-block is unpacked once for the
    four, most of its instructions, and each token's bits are those it gets alone."""
    literally(code)
    x0, x1, x2, x3 = XQ[t], XQ[t + 1], XQ[t + 2], XQ[t + 3]
    a0, a1, a2, a3 = XA[t], XA[t + 1], XA[t + 2], XA[t + 3]
    c0, c1, c2, c3 = vz8(), vz8(), vz8(), vz8()
    t0, t1, t2, t3 = vz8(), vz8(), vz8(), vz8()
    if code == F.Q3_K or code == F.Q4_K or code == F.Q5_K or code == F.Q6_K:
        for sb in range(x0.shape[0] // 256):
            o = sb * tile
            for line in range(0, tile, 64):
                prefetch(wg, o + line + PREFETCH_BYTES)
            if code == F.Q4_K or code == F.Q5_K:
                c0, c1, c2, c3, t0, t1, t2, t3 = _q4_k_superblock4(code, wg, o, x0, x1, x2, x3, a0, a1, a2, a3, sb,
                                                                   c0, c1, c2, c3, t0, t1, t2, t3)
            else:
                c0, c1, c2, c3, t0, t1, t2, t3 = _q6_k_superblock4(code, wg, o, x0, x1, x2, x3, a0, a1, a2, a3, sb,
                                                                   c0, c1, c2, c3, t0, t1, t2, t3)
    else:
        for k in range(x0.shape[0] // 32):
            o = k * tile
            prefetch(wg, o + PREFETCH_BYTES)
            l0, l1, l2, l3, h0, h1, h2, h3 = _block_steps(code, wg, o, q, hb)
            c0, t0 = _block_token(l0, l1, l2, l3, h0, h1, h2, h3, wg, o, m, x0, a0, k, c0, t0)
            c1, t1 = _block_token(l0, l1, l2, l3, h0, h1, h2, h3, wg, o, m, x1, a1, k, c1, t1)
            c2, t2 = _block_token(l0, l1, l2, l3, h0, h1, h2, h3, wg, o, m, x2, a2, k, c2, t2)
            c3, t3 = _block_token(l0, l1, l2, l3, h0, h1, h2, h3, wg, o, m, x3, a3, k, c3, t3)
    store_four(OUT, t, oo, c0, c1, c2, c3, t0, t1, t2, t3, _offset_scale(code))


@_exact
def token_rows_k(code, wg, xq, xa, out, oo, tile):
    """As `token_rows` for the K-quants (Q3_K, Q4_K, Q5_K, Q6_K): one tile per 256-quant super-block."""
    literally(code)
    acc = vz8()
    tail = vz8()
    for sb in range(xq.shape[0] // 256):
        o = sb * tile
        if code == F.Q6_K or code == F.Q3_K or HINT_Q4_K:  # whole tiles ahead: L2, then L1 (`HINT_K_L1`)
            for line in range(0, tile, 64):
                prefetch_l2(wg, o + line + PREFETCH_BYTES_K_L2)
            if HINT_K_L1:
                for line in range(0, tile, 64):
                    prefetch(wg, o + line + PREFETCH_BYTES_K)
        if code == F.Q4_K or code == F.Q5_K:
            acc, tail = _q4_k_superblock(code, wg, o, xq, xa, sb, acc, tail)
        else:
            acc, tail = _q6_k_superblock(code, wg, o, xq, xa, sb, acc, tail)
    store_rows(out, oo, acc, tail, _offset_scale(code))


@_exact
def interleaved_q8_rows(code, wp, XQ, XA, OUT, g0, g1, t0, t1, tile, q, m, hb):
    """OUT[t, 8g:8g+8] for groups g0..g1-1 and tokens t0..t1-1 (serial; callers parallelize)."""
    literally(code)
    if HAS_VNNI_512 and has_wide(code) and t1 - t0 >= 4:
        # prompts: pairs of groups two a 512-bit step (`_wide.py`), in a call of their own so
        # the one-token path below compiles as it did without them
        pairs_end = g0 + (g1 - g0) // 2 * 2
        _wide_rows(code, wp, XQ, XA, OUT, g0, pairs_end, t0, t1, tile, q, m, hb)
        g0 = pairs_end
    for g in range(g0, g1):
        wg = wp[g]
        first = t0
        if code != F.Q8_0:
            while first + 4 <= t1:
                four_tokens(code, wg, XQ, XA, OUT, first, g * ROWS, tile, q, m, hb)
                first += 4
        for t in range(first, t1):
            if code == F.Q3_K or code == F.Q4_K or code == F.Q5_K or code == F.Q6_K:
                token_rows_k(code, wg, XQ[t], XA[t], OUT[t], g * ROWS, tile)
            else:
                token_rows(code, wg, XQ[t], XA[t], OUT[t], g * ROWS, tile, q, m, hb)


@_exact
def _wide_rows(code, wp, XQ, XA, OUT, g0, g1, t0, t1, tile, q, m, hb):
    # `interleaved_q8_rows` for an even number of groups, two at a time: four tokens a call of
    # `four_tokens_wide` (`_k`), the tokens left over one at a time
    literally(code)
    for g in range(g0, g1, 2):
        first = t0
        while first + 4 <= t1:
            if code == F.Q4_K:
                four_tokens_wide_k(code, wp[g], wp[g + 1], XQ, XA, OUT, first, g * ROWS, tile, _offset_scale(code))
            else:
                four_tokens_wide(code, wp[g], wp[g + 1], XQ, XA, OUT, first, g * ROWS, tile, q, m, hb,
                                 _offset_scale(code))
            first += 4
        for t in range(first, t1):
            for gg in range(g, g + 2):
                if code == F.Q4_K:
                    token_rows_k(code, wp[gg], XQ[t], XA[t], OUT[t], gg * ROWS, tile)
                else:
                    token_rows(code, wp[gg], XQ[t], XA[t], OUT[t], gg * ROWS, tile, q, m, hb)


@njit(parallel=True, cache=True)
def _tasks(code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    # OUT_k = X @ W_k.T for up to three weights of one format that read the same X (q, k and v;
    # gate and up) in one parallel loop over all their row groups (a decode layer of smollm2:135m:
    # 17.5 -> 9.5 us for q, k and v against a loop each); one weight is the call with two empty
    # ones (shape (0, _): no task). A token's rows get the same bits in any of these calls.
    literally(code)
    XQ, XA = quantize_rows(X)
    n_tasks = count_tasks(w0, w1, w2, X.shape[0])
    parts = min(n_tasks, LOOP_PARTS)
    for p in prange(parts):
        first = p * n_tasks // parts
        run_tasks(code, first, (p + 1) * n_tasks // parts - first, w0, w1, w2, XQ, XA, O0, O1, O2, tile, q, m, hb)


@njit(inline="always")
def _weight_tasks(w):
    # one weight's tasks per chunk of tokens: its row groups, GROUPS_PER_TASK at a time
    return (w.shape[0] + GROUPS_PER_TASK - 1) // GROUPS_PER_TASK


@njit(cache=True)
def chunk_tasks(w0, w1, w2):
    """Tasks of `run_tasks` per chunk of tokens: GROUPS_PER_TASK row groups of the three weights."""
    return _weight_tasks(w0) + _weight_tasks(w1) + _weight_tasks(w2)


@njit(cache=True)
def count_tasks(w0, w1, w2, n_rows):
    """How many tasks `run_tasks` numbers for these weights and `n_rows` rows of X."""
    return (n_rows + TOKENS_PER_CHUNK - 1) // TOKENS_PER_CHUNK * chunk_tasks(w0, w1, w2)


@njit(cache=True)
def task_weight(k, w0, w1, w2):
    """(which, first group): the weight (0, 1, 2) task k of a chunk (`run_tasks`) reads, and the
    first of its row groups there."""
    n0 = _weight_tasks(w0)
    if k < n0:
        return 0, k * GROUPS_PER_TASK
    n1 = _weight_tasks(w1)
    if k < n0 + n1:
        return 1, (k - n0) * GROUPS_PER_TASK
    return 2, (k - n0 - n1) * GROUPS_PER_TASK


@_exact
def run_tasks(code, first, count, w0, w1, w2, XQ, XA, O0, O1, O2, tile, q, m, hb):
    """Tasks first..first+count-1 of `count_tasks`. Task c is GROUPS_PER_TASK row groups of one
    weight (`task_weight`) for one chunk of TOKENS_PER_CHUNK tokens, chunk-major, so a thread's
    run of tasks shares its chunk's tokens; a task's bits do not depend on which run or thread
    computes it. A weight's consecutive tasks go to the kernel as one run of row groups: a
    one-token task of 896 columns is ~1,000 cycles, and a call per task (two divisions, the
    weight's lookup, the calls) took ~15% of it (Q5_0 4864 x 896, two threads: 53 -> 63-66 GB/s
    from L2, 23.8 -> 24.6-25.4 from memory)."""
    literally(code)
    T = XQ.shape[0]
    per = chunk_tasks(w0, w1, w2)
    n0 = _weight_tasks(w0)
    n01 = n0 + _weight_tasks(w1)
    c = first
    end = first + count
    while c < end:
        chunk = c // per
        base = chunk * per
        t0 = chunk * TOKENS_PER_CHUNK
        t1 = min(T, t0 + TOKENS_PER_CHUNK)
        k = c - base  # this chunk's tasks k..stop-1: weight 0's, then 1's, then 2's
        stop = min(end, base + per) - base
        if k < n0:
            e = min(stop, n0)
            _task_rows(code, w0, XQ, XA, O0, k, e, t0, t1, tile, q, m, hb)
            k = e
        if k < stop and k < n01:
            e = min(stop, n01)
            _task_rows(code, w1, XQ, XA, O1, k - n0, e - n0, t0, t1, tile, q, m, hb)
            k = e
        if k < stop:
            _task_rows(code, w2, XQ, XA, O2, k - n01, stop - n01, t0, t1, tile, q, m, hb)
        c = base + stop


@njit(inline="always")
def _task_rows(code, wp, XQ, XA, OUT, k0, k1, t0, t1, tile, q, m, hb):
    # one weight's tasks k0..k1-1 (its own numbering) for tokens t0..t1-1
    interleaved_q8_rows(code, wp, XQ, XA, OUT, k0 * GROUPS_PER_TASK, min(wp.shape[0], k1 * GROUPS_PER_TASK), t0, t1,
                        tile, q, m, hb)


@njit(cache=True)
def own_tasks(n_tasks):
    """A matmul's tasks each of two team threads runs from its end before any is shared
    (`sync.first_share`): 15/32 each, so only the last 1/16 goes in shared takes. The second
    thread takes from the back, each take a jump its prefetch stream starts cold after (and a
    contended counter); with a quarter each, cycle counters in qwen2.5-coder:0.5b's decode put a
    token's matmuls 1-4% slower in five alternated rounds, and with halves (nothing shared) the
    wait for the slower thread ate the gain (twenty-second session)."""
    return n_tasks * 15 // 32


@_exact
def team_tasks(code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state):
    """`_tasks` for thread `tid` of a team (`backends/cpu/team.py`), shared as `sync.first_share`
    and `sync.next_share` say: two threads from either end (`own_tasks` each, then the middle to
    whichever is ahead), each streaming its weights in order; more threads evenly, as Numba's
    static schedule. Each task's bits are `_tasks`'s, whichever thread runs it."""
    literally(code)
    XQ, XA = quantize_rows(X)  # each thread its own: one row is ~0.1 us, a barrier more
    n_tasks = count_tasks(w0, w1, w2, X.shape[0])
    own = own_tasks(n_tasks)
    first, count, done = first_share(tid, n_threads, n_tasks, own)
    while True:
        run_tasks(code, first, count, w0, w1, w2, XQ, XA, O0, O1, O2, tile, q, m, hb)
        first, count, done = next_share(state, tid, n_threads, n_tasks, own, done, 2)
        if count == 0:
            return


@intrinsic
def read_only(typingctx, array):
    """The same array typed read-only, as the plan's weights are (`CpuWeight`): a kernel reached
    with it is the build Python callers compiled, not a second one for writable arrays."""
    def codegen(context, builder, sig, args):
        # a new reference to the same memory: the caller releases its argument and the result
        return impl_ret_borrowed(context, builder, sig.return_type, args[0])
    return types.Array(array.dtype, array.ndim, array.layout, readonly=True)(array), codegen


def empty_weight() -> np.ndarray:
    """A weight with no row groups: an absent second or third weight of an entry, which it gives
    no task (read-only, as the plan's weights: one build of the kernel serves both)."""
    none = np.zeros((0, 1), np.uint8)
    none.flags.writeable = False
    return none


_NO_WEIGHT = empty_weight()


# One entry per format, so each compiles (and caches) on its first use only: one to three
# weights reading the same X (one weight is the call with two `empty_weight`s).
@njit(cache=True)
def _q4_0(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(2, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q4_1(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(3, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q5_0(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(6, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q5_1(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(7, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q8_0(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(8, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q3_k(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(11, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q4_k(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(12, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q5_k(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(13, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


@njit(cache=True)
def _q6_k(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    _tasks(14, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)


_ENTRY = {F.Q4_0: _q4_0, F.Q4_1: _q4_1, F.Q5_0: _q5_0, F.Q5_1: _q5_1, F.Q8_0: _q8_0, F.Q3_K: _q3_k, F.Q4_K: _q4_k, F.Q5_K: _q5_k,
          F.Q6_K: _q6_k}


def run_interleaved(code: int, wp: np.ndarray, X: np.ndarray, OUT: np.ndarray, tile: int, q: int, m: int,
                    hb: int) -> None:
    """OUT = X @ W.T for one interleaved weight: its format's entry with two empty weights."""
    _ENTRY[code](wp, _NO_WEIGHT, _NO_WEIGHT, X, OUT, OUT, OUT, tile, q, m, hb)


def interleaved_kernel(code: int, wp: np.ndarray, cols: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """f(X, OUT): OUT = X @ W.T from int8 activations, W = `wp` interleaved (`interleaved.pack`) with
    `cols` columns; X float32[T, cols], OUT float32[T, rows], C-contiguous. A token's row of OUT
    has the same bits whatever else X holds. The geometry is checked here once, and T per call
    (the SIMD loads do no bounds checks)."""
    per_block = 256 if code in SUPER_LAYOUTS else 32
    if cols % per_block or wp.ndim != 2 or wp.dtype != np.uint8 or wp.shape[1] != cols // per_block * tile_bytes(code):
        raise ValueError(f"not an interleaved {F.TYPE_NAME[code]} weight of {cols} columns")
    rows = wp.shape[0] * ROWS
    lay = LAYOUTS.get(code)
    tile, q, m, hb = (lay.tile, lay.q, lay.m, lay.hb) if lay else (tile_bytes(code), 0, -1, -1)

    def run(X: np.ndarray, OUT: np.ndarray) -> None:
        if X.shape[1] != cols or OUT.shape != (X.shape[0], rows):
            raise ValueError(f"expected X float32[T, {cols}] and OUT float32[T, {rows}]")
        run_interleaved(code, wp, X, OUT, tile, q, m, hb)
    return run


@njit(fastmath=True, cache=True, nogil=True)
def _dequantize_tile(code, wp, r0, r1, out, block, qs, qs_bytes, qh, m, hb, q):
    """out[i] = row r0+i of an interleaved weight as float32, the same values `deq_row` gives the
    GGML row (it is rebuilt, then dequantized); r0 a multiple of 8. Serial, like `_dequantize_tile`."""
    tile = (_Q4_K_TILE if code == F.Q4_K else _Q5_K_TILE if code == F.Q5_K else _Q6_K_TILE if code == F.Q6_K
            else _Q3_K_TILE if code == F.Q3_K else ROWS * block)
    ggml = np.empty((ROWS, wp.shape[1] // tile * block), np.uint8)
    for g in range(r0 // ROWS, (r1 + ROWS - 1) // ROWS):
        if code == F.Q3_K or code == F.Q4_K or code == F.Q5_K or code == F.Q6_K:
            unpack_group_k(code, wp[g], ggml)
        else:
            unpack_group(wp[g], ggml, block, qs, qs_bytes, qh, m, hb, q)
        for r in range(ROWS):
            i = g * ROWS + r - r0
            if 0 <= i < r1 - r0:
                deq_row(code, ggml[r], out[i])


def dequantize_tile(code: int, wp: np.ndarray, r0: int, r1: int, out: np.ndarray) -> None:
    """out[i] = row r0+i (r0 a multiple of 8) of interleaved weight `wp` as float32: exactly what
    `deq_row` gives the GGML row, which is rebuilt from the tile first."""
    if r0 % ROWS or r0 < 0 or r1 > wp.shape[0] * ROWS or out.shape[0] < r1 - r0:
        raise ValueError("row range out of bounds")
    if out.shape[1] != wp.shape[1] // tile_bytes(code) * (256 if code in SUPER_LAYOUTS else 32):
        raise ValueError("out has the wrong number of columns")
    lay = LAYOUTS.get(code)
    params = (lay.block, lay.qs, lay.qs_bytes, lay.qh, lay.m, lay.hb, lay.q) if lay else (block_bytes(code), 0, 0, -1, -1, -1, 0)
    _dequantize_tile(code, wp, r0, r1, out, *params)
