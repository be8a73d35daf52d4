"""Weights interleaved eight rows at a time: the layout the int8 decode kernel reads fastest.

Why: GGML keeps each 32-quant block's scale beside its quants, one row after another, so a
one-token dot spends most of its instructions on per-block scalar work: a half-float scale to
load, convert, multiply and broadcast, a minimum to add, and a horizontal sum per row at the
end. Put block k of eight rows side by side and that work is shared: the eight scales convert
as one vector, one `vpdpbusd` adds four quants of every row at once (lane r is row r), and no
lane is ever summed across. `_interleaved.py` is the kernel; this module is the layout.

Formats: the ones with one scale per 32 quants (`FORMATS`). A weight is repacked when its
rows are a multiple of 8. The tile of rows 8g..8g+7 and block k is 8 * (the format's block
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
FORMATS: frozenset[int] = frozenset(LAYOUTS)


def can_pack(code: int, rows: int, cols: int) -> bool:
    """Whether a `rows` x `cols` weight of format `code` has an interleaved layout."""
    return code in LAYOUTS and rows % ROWS == 0 and cols % 32 == 0 and rows > 0


def _params(code: int) -> tuple[int, ...]:
    lay = LAYOUTS[code]
    return lay.block, lay.qs, lay.qs_bytes, lay.qh, lay.m, lay.hb, lay.q


def pack(code: int, w: np.ndarray) -> np.ndarray:
    """GGML rows uint8[rows, row_bytes] -> the interleaved uint8[rows / 8, row_bytes * 8]."""
    lay = LAYOUTS[code]
    rows, row_bytes = w.shape
    if rows % ROWS or row_bytes % lay.block:
        raise ValueError(f"cannot interleave a {rows}x{row_bytes}-byte {F.TYPE_NAME[code]} weight")
    out = np.empty((rows // ROWS, row_bytes * ROWS), np.uint8)
    _pack(np.ascontiguousarray(w), out, *_params(code))
    return out


def unpack(code: int, packed: np.ndarray) -> np.ndarray:
    """The interleaved layout back to GGML rows uint8[rows, row_bytes] (exactly)."""
    groups, tiles_bytes = packed.shape
    out = np.empty((groups * ROWS, tiles_bytes // ROWS), np.uint8)
    for g in range(groups):
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
