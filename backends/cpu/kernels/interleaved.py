"""Weights interleaved eight rows at a time: the layout the int8 decode kernel reads fastest.

Why: GGML keeps each 32-quant block's scale beside its quants, one row after another, so a
one-token dot spends most of its instructions on per-block scalar work: a half-float scale to
load, convert, multiply and broadcast, a minimum to add, and a horizontal sum per row at the
end. Put block k of eight rows side by side and that work is shared: the eight scales convert
as one vector, one `vpdpbusd` adds four quants of every row at once (lane r is row r), and no
lane is ever summed across. `_interleaved.py` is the kernel; this module is the layout.

Formats (`FORMATS`): the ones with one scale per 32 quants (`LAYOUTS`), and Q3_K, Q4_K, Q5_K and
Q6_K (`SUPER_LAYOUTS`: one tile per 256-quant super-block of 8 rows, the run scales unpacked to one
byte each, described at `SuperTileLayout`). A weight is repacked when its rows are a multiple of 8. The tile of rows 8g..8g+7 and block k is 8 * (the format's block
bytes), so the repacked matrix `uint8[rows / 8, blocks * tile]` is exactly as large as the
GGML one. Inside a tile:

    d   8 half scales, row r at bytes 2r, 2r+1
    m   8 half minima (Q4_1, Q5_1)
    hb  32 bytes (Q5_0, Q5_1): bit j of byte 4r+i is the fifth bit of quant 4j+i of row r
    q   the eight rows' quant bytes, seen as 4-byte words, transposed: word w of row r at
        bytes 32w + 4r. For the 4-bit formats word w holds quants 4w..4w+3 in its low
        nibbles and 16+4w.. in its high ones, so one 32-byte load feeds steps w and w+4 of
        the dot; Q8_0's word w holds quants 4w..4w+3.

`pack` and `unpack` are exact inverses (tests check every format against GGML bytes).
"""
from __future__ import annotations

from typing import Callable

import attrs
import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import types
from numba.extending import intrinsic

from ._simd import _i32, _is_u8_array, _ptr

from . import formats as F

ROWS = 8  # rows per tile: eight 32-bit lanes of a 256-bit vector


@attrs.frozen
class TileLayout:
    """Where each part of a format's block sits, in the GGML block and in the tile."""

    block: int  # bytes of one GGML block (32 quants)
    qs: int  # offset of the quant bytes in the GGML block
    qs_bytes: int  # 16 (4-bit) or 32 (Q8_0)
    qh: int = -1  # offset of the 32 fifth bits in the GGML block (Q5_0, Q5_1)
    has_min: bool = False  # a half minimum at GGML offset 2

    @property
    def tile(self) -> int:
        return ROWS * self.block

    @property
    def m(self) -> int:
        return 2 * ROWS if self.has_min else -1

    @property
    def hb(self) -> int:
        return (4 if self.has_min else 2) * ROWS if self.qh >= 0 else -1

    @property
    def q(self) -> int:
        return self.tile - ROWS * self.qs_bytes


LAYOUTS: dict[int, TileLayout] = {
    F.Q4_0: TileLayout(block=18, qs=2, qs_bytes=16),
    F.Q4_1: TileLayout(block=20, qs=4, qs_bytes=16, has_min=True),
    F.Q5_0: TileLayout(block=22, qs=6, qs_bytes=16, qh=2),
    F.Q5_1: TileLayout(block=24, qs=8, qs_bytes=16, qh=4, has_min=True),
    F.Q8_0: TileLayout(block=34, qs=2, qs_bytes=32),
}


def can_pack(code: int, rows: int, cols: int) -> bool:
    """Whether a `rows` x `cols` weight of format `code` has an interleaved layout."""
    if code in SUPER_LAYOUTS:
        return rows % ROWS == 0 and cols % 256 == 0 and rows > 0
    return code in LAYOUTS and rows % ROWS == 0 and cols % 32 == 0 and rows > 0


def tile_bytes(code: int) -> int:
    """Bytes of one tile (eight rows, one block or super-block) of format `code`."""
    return (SUPER_LAYOUTS[code] if code in SUPER_LAYOUTS else LAYOUTS[code]).tile


def block_bytes(code: int) -> int:
    """Bytes of one GGML block (or super-block) of format `code`."""
    return (SUPER_LAYOUTS[code] if code in SUPER_LAYOUTS else LAYOUTS[code]).block


def _params(code: int) -> tuple[int, ...]:
    lay = LAYOUTS[code]
    return lay.block, lay.qs, lay.qs_bytes, lay.qh, lay.m, lay.hb, lay.q


def pack(code: int, w: np.ndarray, empty: Callable[..., np.ndarray] = np.empty) -> np.ndarray:
    """GGML rows uint8[rows, row_bytes] -> the interleaved uint8[rows / 8, blocks * tile], in
    memory from `empty` (np.empty's signature: the cpu backend's `WeightArena`)."""
    rows, row_bytes = w.shape
    block = block_bytes(code)
    if rows % ROWS or row_bytes % block:
        raise ValueError(f"cannot interleave a {rows}x{row_bytes}-byte {F.TYPE_NAME[code]} weight")
    out = empty((rows // ROWS, row_bytes // block * tile_bytes(code)), np.uint8)
    if code in SUPER_LAYOUTS:
        _pack_k(code, np.ascontiguousarray(w), out)
    else:
        _pack(np.ascontiguousarray(w), out, *_params(code))
    return out


def unpack(code: int, packed: np.ndarray) -> np.ndarray:
    """The interleaved layout back to GGML rows uint8[rows, row_bytes] (exactly)."""
    groups, tiles_bytes = packed.shape
    out = np.empty((groups * ROWS, tiles_bytes // tile_bytes(code) * block_bytes(code)), np.uint8)
    for g in range(groups):
        if code in SUPER_LAYOUTS:
            unpack_group_k(code, packed[g], out[g * ROWS:(g + 1) * ROWS])
        else:
            unpack_group(packed[g], out[g * ROWS:(g + 1) * ROWS], *_params(code))
    return out


@njit(cache=True, nogil=True)
def _pack(w, out, block, qs, qs_bytes, qh, m, hb, q):
    nb = w.shape[1] // block
    tile = ROWS * block
    for g in range(out.shape[0]):
        t = out[g]
        for k in range(nb):
            o = k * tile
            for r in range(ROWS):
                src = w[g * ROWS + r]
                b = k * block
                t[o + 2 * r] = src[b]
                t[o + 2 * r + 1] = src[b + 1]
                if m >= 0:
                    t[o + m + 2 * r] = src[b + 2]
                    t[o + m + 2 * r + 1] = src[b + 3]
                if qh >= 0:
                    bits = (np.uint32(src[b + qh]) | (np.uint32(src[b + qh + 1]) << 8)
                            | (np.uint32(src[b + qh + 2]) << 16) | (np.uint32(src[b + qh + 3]) << 24))
                    for i in range(4):
                        v = np.uint32(0)
                        for j in range(8):
                            v |= ((bits >> np.uint32(4 * j + i)) & np.uint32(1)) << np.uint32(j)
                        t[o + hb + 4 * r + i] = np.uint8(v)
                for wd in range(qs_bytes // 4):
                    for c in range(4):
                        t[o + q + 32 * wd + 4 * r + c] = src[b + qs + 4 * wd + c]


@intrinsic
def words_to_rows(typingctx, t, to, dst, do, stride):
    """Undo the word transposition for four words: the 128 bytes t[to:to+128] hold word w of row
    r at 32w + 4r (w < 4, r < 8); row r's 16 bytes go to dst[do + r * stride:]. One shuffle."""
    if not (_is_u8_array(t) and _is_u8_array(dst)):
        return None

    def codegen(context, builder, sig, args):
        v8 = ir.VectorType(_i32, 8)
        v = [builder.load(_ptr(context, builder, sig.args[0], args[0], builder.add(args[1], ir.Constant(args[1].type, 32 * w)), v8),
                          align=1) for w in range(4)]
        lo = builder.shuffle_vector(v[0], v[1], ir.Constant(ir.VectorType(_i32, 16), list(range(16))))
        hi = builder.shuffle_vector(v[2], v[3], ir.Constant(ir.VectorType(_i32, 16), list(range(16))))
        # all words [w * 8 + r] -> [r * 4 + w]
        rows = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), [w * 8 + r for r in range(8) for w in range(4)]))
        v4 = ir.VectorType(_i32, 4)
        do = context.cast(builder, args[3], sig.args[3], types.intp)
        stride = context.cast(builder, args[4], sig.args[4], types.intp)
        for r in range(8):
            part = builder.shuffle_vector(rows, rows, ir.Constant(v4, [4 * r + w for w in range(4)]))
            at = builder.add(do, builder.mul(stride, ir.Constant(stride.type, r)))
            builder.store(part, _ptr(context, builder, sig.args[2], args[2], at, v4), align=1)
        return context.get_dummy_value()

    return types.none(t, to, dst, do, stride), codegen


# bit j of a byte moved to bit 4j: undoes the hb transposition four bytes (i = 0..3) at a time
_SPREAD = np.array([sum(((v >> j) & 1) << (4 * j) for j in range(8)) for v in range(256)], np.uint32)


@njit(cache=True, nogil=True)
def unpack_group(t, dst, block, qs, qs_bytes, qh, m, hb, q):
    """GGML bytes of the eight rows of one interleaved row group `t` into dst uint8[8, row_bytes]."""
    row_bytes = dst.shape[1]
    nb = row_bytes // block
    tile = ROWS * block
    flat = dst.reshape(-1)
    for k in range(nb):
        o = k * tile
        b = k * block
        for r in range(ROWS):
            at = r * row_bytes + b
            flat[at] = t[o + 2 * r]
            flat[at + 1] = t[o + 2 * r + 1]
            if m >= 0:
                flat[at + 2] = t[o + m + 2 * r]
                flat[at + 3] = t[o + m + 2 * r + 1]
            if qh >= 0:
                h = o + hb + 4 * r
                bits = (_SPREAD[t[h]] | (_SPREAD[t[h + 1]] << np.uint32(1)) | (_SPREAD[t[h + 2]] << np.uint32(2))
                        | (_SPREAD[t[h + 3]] << np.uint32(3)))
                flat[at + qh] = np.uint8(bits & np.uint32(255))
                flat[at + qh + 1] = np.uint8((bits >> np.uint32(8)) & np.uint32(255))
                flat[at + qh + 2] = np.uint8((bits >> np.uint32(16)) & np.uint32(255))
                flat[at + qh + 3] = np.uint8(bits >> np.uint32(24))
        for wd in range(0, qs_bytes // 4, 4):
            words_to_rows(t, o + q + 32 * wd, flat, b + qs + 4 * wd, row_bytes)


# ---------------------------------------------------------------- K-quants: 256-quant super-blocks
#
# Q3_K to Q6_K interleave the same way, one tile per super-block of eight rows. Their per-run
# scales are unpacked into bytes, [run (Q4_K, Q5_K) or 16-quant group (Q3_K, Q6_K)][row], so the
# kernel turns eight rows' scales into floats with one conversion; Q4_K's and Q5_K's tiles are 32
# bytes larger than eight GGML super-blocks for that (1184 against 1152, 1440 against 1408). The
# quant bytes are transposed as 4-byte words exactly as above (word w of row r at 32w + 4r): Q4_K's
# (and Q5_K's) word w holds four quants of run 2 (w // 8) in its low nibbles and of the next run in
# its high ones; Q5_K's `qh` word i holds the fifth bits of quants 4i..4i+3 of every run (bit j:
# run j), as GGML keeps them; Q6_K's `ql` and `qh` words hold the low four and the high two bits of
# the runs GGML keeps in those bytes. Q3_K is laid out as Q6_K: its sixteen 6-bit scales unpacked
# to bytes, minus 32 (signed, as Q6_K's), its two-bit `qs` words (word 8h + i: bits 2t of run
# 4h + t's quants 4i..4i+3) and its `hmask` words (bit 4h + t: the run's third bit), 912 bytes
# against GGML's 880.


@attrs.frozen
class SuperTileLayout:
    """A K-quant's tile: offsets of its parts in the tile (`*_at`) and in the GGML super-block."""

    block: int  # bytes of one GGML super-block (256 quants)
    tile: int
    q_at: int  # the quant bytes (Q4_K qs, Q6_K ql) as transposed words
    q_from: int
    scale_at: int  # scale bytes [run or group][row]
    dmin_at: int = -1  # Q4_K: 8 half minimum scales, then 64 minimum bytes at mins_at
    mins_at: int = -1
    qh_at: int = -1  # Q3_K, Q5_K, Q6_K: the high bits (Q3_K's mask) as transposed words
    qh_from: int = -1


Q4_K_LAYOUT = SuperTileLayout(block=144, tile=1184, q_at=160, q_from=16, scale_at=32, dmin_at=16, mins_at=96)
Q3_K_LAYOUT = SuperTileLayout(block=110, tile=912, q_at=144, q_from=32, scale_at=16, qh_at=656, qh_from=0)
Q5_K_LAYOUT = SuperTileLayout(block=176, tile=1440, q_at=160, q_from=48, scale_at=32, dmin_at=16, mins_at=96,
                              qh_at=1184, qh_from=16)
Q6_K_LAYOUT = SuperTileLayout(block=210, tile=1680, q_at=144, q_from=0, scale_at=16, qh_at=1168, qh_from=128)
SUPER_LAYOUTS: dict[int, SuperTileLayout] = {F.Q3_K: Q3_K_LAYOUT, F.Q4_K: Q4_K_LAYOUT, F.Q5_K: Q5_K_LAYOUT,
                                              F.Q6_K: Q6_K_LAYOUT}
FORMATS: frozenset[int] = frozenset(LAYOUTS) | frozenset(SUPER_LAYOUTS)
# Formats whose prompts (any number of tokens) also go through the interleaved int8 kernel rather
# than BLAS sgemm on dequantized tiles: four tokens share each block's unpacking, and tokens go in
# chunks of 64. 512-token prefill on 2 threads (AMD EPYC, AVX-512 VNNI, docs/performance.md tenth
# session): gemma3 415 -> 845-938 tok/s, qwen 170 -> 327-343, smollm2 357 -> 700+. Q6_K's kernel
# is slower per flop than sgemm on qwen's ffn_down (97 against 148 GFLOP/s) yet the models' prefill
# is faster with it (qwen +5%, gemma3 +9%: no tile to dequantize, no second pool); Q8_0 unpacks
# nothing to share and measured within noise (qwen -5%, gemma3 +1%), so it stays on sgemm.
INT8_PREFILL: frozenset[int] = frozenset({F.Q4_0, F.Q4_1, F.Q5_0, F.Q5_1, F.Q3_K, F.Q4_K, F.Q5_K, F.Q6_K})


@njit(cache=True, nogil=True)
def _to_words(src, so, n_words, t, to, r):
    for w in range(n_words):
        for b in range(4):
            t[to + 32 * w + 4 * r + b] = src[so + 4 * w + b]


@njit(cache=True, nogil=True)
def _k4_scales(q, j):
    # GGML's get_scale_min_k4: eight 6-bit scales and minima packed into 12 bytes
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


@njit(cache=True, nogil=True)
def _k_sizes(code):
    # (GGML super-block bytes, tile bytes) of a K-quant with an interleaved layout
    if code == F.Q4_K:
        return 144, 1184
    if code == F.Q5_K:
        return 176, 1440
    if code == F.Q3_K:
        return 110, 912
    return 210, 1680


@njit(cache=True, nogil=True)
def _k3_scale(q, j):
    # GGML's Q3_K scale j (0-15) of its 12 packed bytes: four low bits in byte j % 8 (the high
    # nibble for j >= 8), two high bits at 2 (j // 4) of byte 8 + j % 4
    return ((q[j % 8] >> (4 * (j // 8))) & 15) | (((q[8 + j % 4] >> (2 * (j // 4))) & 3) << 4)


@njit(cache=True, nogil=True)
def _pack_k(code, w, out):
    lay_block, tile = _k_sizes(code)
    nsb = w.shape[1] // lay_block
    for g in range(out.shape[0]):
        t = out[g]
        for k in range(nsb):
            o = k * tile
            for r in range(ROWS):
                src = w[g * ROWS + r]
                b = k * lay_block
                if code == F.Q3_K:
                    t[o + 2 * r] = src[b + 108]
                    t[o + 2 * r + 1] = src[b + 109]
                    for j in range(16):
                        t[o + 16 + 8 * j + r] = np.uint8((_k3_scale(src[b + 96:b + 108], j) - 32) & 255)
                    _to_words(src, b + 32, 16, t, o + 144, r)
                    _to_words(src, b, 8, t, o + 656, r)
                elif code == F.Q4_K or code == F.Q5_K:
                    t[o + 2 * r] = src[b]
                    t[o + 2 * r + 1] = src[b + 1]
                    t[o + 16 + 2 * r] = src[b + 2]
                    t[o + 16 + 2 * r + 1] = src[b + 3]
                    for j in range(8):
                        sc, mn = _k4_scales(src[b + 4:b + 16], j)
                        t[o + 32 + 8 * j + r] = sc
                        t[o + 96 + 8 * j + r] = mn
                    if code == F.Q4_K:
                        _to_words(src, b + 16, 32, t, o + 160, r)
                    else:
                        _to_words(src, b + 48, 32, t, o + 160, r)
                        _to_words(src, b + 16, 8, t, o + 1184, r)
                else:
                    t[o + 2 * r] = src[b + 208]
                    t[o + 2 * r + 1] = src[b + 209]
                    for j in range(16):
                        t[o + 16 + 8 * j + r] = src[b + 192 + j]
                    _to_words(src, b, 32, t, o + 144, r)
                    _to_words(src, b + 128, 16, t, o + 1168, r)


@njit(cache=True, nogil=True)
def unpack_group_k(code, t, dst):
    """GGML bytes of the eight rows of one interleaved K-quant row group `t` into dst uint8[8, row_bytes]."""
    lay_block, tile = _k_sizes(code)
    nsb = dst.shape[1] // lay_block
    flat = dst.reshape(-1)
    for k in range(nsb):
        o = k * tile
        b = k * lay_block
        if code == F.Q4_K:
            for wd in range(0, 32, 4):
                words_to_rows(t, o + 160 + 32 * wd, flat, b + 16 + 4 * wd, dst.shape[1])
        elif code == F.Q5_K:
            for wd in range(0, 32, 4):
                words_to_rows(t, o + 160 + 32 * wd, flat, b + 48 + 4 * wd, dst.shape[1])
            for wd in range(0, 8, 4):
                words_to_rows(t, o + 1184 + 32 * wd, flat, b + 16 + 4 * wd, dst.shape[1])
        elif code == F.Q3_K:
            for wd in range(0, 16, 4):
                words_to_rows(t, o + 144 + 32 * wd, flat, b + 32 + 4 * wd, dst.shape[1])
            for wd in range(0, 8, 4):
                words_to_rows(t, o + 656 + 32 * wd, flat, b + 4 * wd, dst.shape[1])
        else:
            for wd in range(0, 32, 4):
                words_to_rows(t, o + 144 + 32 * wd, flat, b + 4 * wd, dst.shape[1])
            for wd in range(0, 16, 4):
                words_to_rows(t, o + 1168 + 32 * wd, flat, b + 128 + 4 * wd, dst.shape[1])
        for r in range(ROWS):
            d = dst[r]
            if code == F.Q3_K:
                d[b + 108] = t[o + 2 * r]
                d[b + 109] = t[o + 2 * r + 1]
                for k in range(12):
                    d[b + 96 + k] = 0
                for j in range(16):
                    sc = (t[o + 16 + 8 * j + r] + 32) & 63
                    d[b + 96 + j % 8] |= (sc & 15) << (4 * (j // 8))
                    d[b + 104 + j % 4] |= (sc >> 4) << (2 * (j // 4))
            elif code == F.Q4_K or code == F.Q5_K:
                d[b] = t[o + 2 * r]
                d[b + 1] = t[o + 2 * r + 1]
                d[b + 2] = t[o + 16 + 2 * r]
                d[b + 3] = t[o + 16 + 2 * r + 1]
                for j in range(4):
                    sc, mn = t[o + 32 + 8 * j + r], t[o + 96 + 8 * j + r]
                    sc4, mn4 = t[o + 32 + 8 * (j + 4) + r], t[o + 96 + 8 * (j + 4) + r]
                    d[b + 4 + j] = (sc & 63) | ((sc4 >> 4) << 6)
                    d[b + 8 + j] = (mn & 63) | ((mn4 >> 4) << 6)
                    d[b + 12 + j] = (sc4 & 15) | ((mn4 & 15) << 4)
            else:
                d[b + 208] = t[o + 2 * r]
                d[b + 209] = t[o + 2 * r + 1]
                for j in range(16):
                    d[b + 192 + j] = t[o + 16 + 8 * j + r]
