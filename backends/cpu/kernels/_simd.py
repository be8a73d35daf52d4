"""Explicit SIMD for the kernels: 16-lane LLVM vectors exposed to Numba as values.

Why this exists: Numba types every integer operation as int64, so a plainly written
nibble-unpack loop vectorizes into 8-lane int64 code, and LLVM's cost model then often
fully unrolls the 16-element inner loop and vectorizes the *block* loop with gathers.
Both cost 2-3x. These intrinsics emit the vector IR we want directly (i32/f32 lanes,
one contiguous load per 16 quants) while the surrounding block loops stay ordinary
Numba code. Everything here is generic LLVM IR, so it legalizes on any target (one zmm
with AVX-512, two ymm with AVX2, four xmm on SSE/NEON), with two target-dependent
choices made at import from the CPU Numba compiles for: `vpdpbusd` for the int8 dots
where VNNI exists (`HAS_VNNI`), else AVX2's `vpmaddubsw` + `vpmaddwd` (`HAS_AVX2`), and a bit-exact integer half->float conversion where
x86 lacks F16C (`HAS_F16C`).

Conventions: every offset is an element index into the array passed with it (a byte
index for the uint8 weight rows). The intrinsics do no bounds checks; the entry
points in `_api` validate shapes once per call.
"""

from __future__ import annotations

import math

import llvmlite.binding as llb
from llvmlite import ir
from numba import njit, types
from numba.core import config
from numba.extending import intrinsic, models, register_model

LANES = 16

_f32 = ir.FloatType()
_i8 = ir.IntType(8)
_i16 = ir.IntType(16)
_i32 = ir.IntType(32)
_vf = ir.VectorType(_f32, LANES)
_vi = ir.VectorType(_i32, LANES)
_vb = ir.VectorType(_i8, LANES)
_vh = ir.VectorType(_i16, LANES)
_vb32 = ir.VectorType(_i8, 32)
_vb64 = ir.VectorType(_i8, 64)
_vi32x32 = ir.VectorType(_i32, 32)
_vf8 = ir.VectorType(_f32, 8)
_vi8 = ir.VectorType(_i32, 8)
_FAST = ("fast",)


class F32x16Type(types.Type):
    """16 float32 lanes held in registers (an LLVM <16 x float>)."""

    def __init__(self):
        super().__init__(name="llamay.F32x16")


class I32x16Type(types.Type):
    """16 int32 lanes held in registers (an LLVM <16 x i32>)."""

    def __init__(self):
        super().__init__(name="llamay.I32x16")


class I32x8Type(types.Type):
    """8 int32 lanes (an LLVM <8 x i32>): the exact integer sums of one block, lane r = row r."""

    def __init__(self):
        super().__init__(name="llamay.I32x8")


class I8x32Type(types.Type):
    """32 int8 lanes (an LLVM <32 x i8>): one 32-quant block for the int8 dot paths."""

    def __init__(self):
        super().__init__(name="llamay.I8x32")


class F32x8Type(types.Type):
    """8 float32 lanes (an LLVM <8 x float>): accumulator of the int8 dot paths."""

    def __init__(self):
        super().__init__(name="llamay.F32x8")


f32x16 = F32x16Type()
i32x16 = I32x16Type()
i32x8 = I32x8Type()
i8x32 = I8x32Type()
f32x8 = F32x8Type()


@register_model(F32x16Type)
class _F32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vf)


@register_model(I32x16Type)
class _I32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vi)


@register_model(I32x8Type)
class _I32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vi8)


@register_model(I8x32Type)
class _I8x32Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vb32)


@register_model(F32x8Type)
class _F32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vf8)


def _target_features() -> set[str]:
    """CPU features of the target Numba compiles for.

    Numba targets the host unless NUMBA_CPU_NAME / NUMBA_CPU_FEATURES say otherwise;
    honour those so that a portable build never contains an instruction it may lack.
    """
    if config.CPU_FEATURES is not None:
        return {f[1:] for f in str(config.CPU_FEATURES).split(",") if f.startswith("+")}
    if config.CPU_NAME not in (None, "host"):
        return set()
    try:
        host = llb.get_host_cpu_features()
    except RuntimeError:
        return set()
    return {k for k in host if host[k]}


FEATURES: frozenset[str] = frozenset(_target_features())  # of the target Numba compiles for
_X86 = llb.get_process_triple().split("-")[0] in ("x86_64", "i386", "i686")
# vpdpbusd on 256-bit vectors: AVX512-VNNI with VL, or AVX-VNNI
HAS_VNNI: bool = _X86 and (("avx512vnni" in FEATURES and "avx512vl" in FEATURES) or "avxvnni" in FEATURES)
# vpdpbusd on 512-bit vectors, with AVX-512BW's byte ops: a block's eight steps in four dots
HAS_VNNI_512: bool = _X86 and {"avx512f", "avx512bw", "avx512vnni"} <= FEATURES
# vpmaddubsw/vpmaddwd for the int8 dots where VNNI is missing
HAS_AVX2: bool = _X86 and "avx2" in FEATURES
# hardware half->float; x86 without F16C would lower fpext to a libcall the JIT lacks
HAS_F16C: bool = (not _X86) or "f16c" in FEATURES


def _host_is_zen() -> bool:
    # the host's own core, whatever target Numba compiles for: hardware prefetchers belong to the
    # machine, so a forced-AVX2 build on a Zen host streams as the host does
    try:
        return llb.get_host_cpu_name().startswith("znver")
    except RuntimeError:
        return False


# AMD's Zen cores (their L1/L2 stride and stream prefetchers) follow a kernel's own forward reads
# without help: there the kernels' extra hints cost more issue slots than they save in waiting
# (the prefetch notes below, and docs/performance.md, twenty-fourth session).
HOST_IS_ZEN: bool = _X86 and _host_is_zen()


# ---------------------------------------------------------------- codegen helpers


def _ptr(context, builder, aryty, ary, index, elty):
    """Pointer to ary[index] reinterpreted as `elty*` (index in array elements)."""
    a = context.make_array(aryty)(context, builder, ary)
    p = builder.gep(a.data, [index])
    return builder.bitcast(p, ir.PointerType(elty))


def _as_i32(context, builder, val, ty):
    return context.cast(builder, val, ty, types.int32)


def _as_f32(context, builder, val, ty):
    return context.cast(builder, val, ty, types.float32)


def _splat(builder, scalar, vecty):
    v = builder.insert_element(ir.Constant(vecty, ir.Undefined), scalar, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, vecty.count), [0] * vecty.count))


def _h2f(builder, h):
    """IEEE half bits (i16 or <n x i16>) to float (float or <n x float>), exactly."""
    vec = isinstance(h.type, ir.VectorType)
    n = h.type.count if vec else 1
    fty = ir.VectorType(_f32, n) if vec else _f32
    if HAS_F16C:
        hty = ir.VectorType(ir.HalfType(), n) if vec else ir.HalfType()
        return builder.fpext(builder.bitcast(h, hty), fty)
    ity = ir.VectorType(_i32, n) if vec else _i32

    def c(v):
        return ir.Constant(ity, [v] * n) if vec else ir.Constant(_i32, v)

    u = builder.zext(h, ity)
    sign = builder.shl(builder.and_(u, c(0x8000)), c(16))
    em = builder.and_(u, c(0x7FFF))
    # normals and subnormals: exponent+mantissa moved into place, rescaled by 2^112 (exact)
    scaled = builder.fmul(builder.bitcast(builder.shl(em, c(13)), fty), builder.bitcast(c(0x77800000), fty))
    # inf / nan: exponent all ones
    special = builder.or_(c(0x7F800000), builder.shl(builder.and_(em, c(0x3FF)), c(13)))
    is_special = builder.icmp_unsigned(">=", em, c(0x7C00))
    bits = builder.select(is_special, special, builder.bitcast(scaled, ity))
    return builder.bitcast(builder.or_(bits, sign), fty)


def _tree_reduce(builder, x, combine):
    """A float vector's lanes folded by a fixed halving tree: combine(low half, high half)."""
    n = x.type.count
    while n > 1:
        h = n // 2
        lo = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, h), list(range(h))))
        hi = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, h), list(range(h, n))))
        x = combine(lo, hi)
        n = h
    return builder.extract_element(x, ir.Constant(_i32, 0))


def _tree_sum(builder, x, flags):
    """Sum of a float vector's lanes by a fixed halving tree (shuffles and adds)."""
    return _tree_reduce(builder, x, lambda lo, hi: builder.fadd(lo, hi, flags=flags))


# Pointer arithmetic below assumes unit stride, so only C-contiguous 1-D arrays type-check.
def _is_c1d(ty, dtype):
    return isinstance(ty, types.Array) and ty.dtype == dtype and ty.ndim == 1 and ty.layout == "C"


def _is_u8_array(ty):
    return _is_c1d(ty, types.uint8)


def _is_f32_array(ty):
    return _is_c1d(ty, types.float32)


def _is_i8_array(ty):
    return _is_c1d(ty, types.int8)


# ---------------------------------------------------------------- scalar loads


@intrinsic
def ld_f16(typingctx, w, off):
    """The IEEE half at bytes w[off:off+2], as float32 (exact; vcvtph2ps with F16C)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], args[1], _i16)
        return _h2f(builder, builder.load(p, align=1))

    return types.float32(w, off), codegen


@intrinsic
def ld_f16_elem(typingctx, w, i):
    """Element i of a row of halfs stored as bytes (bytes 2i, 2i+1), as float32."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], builder.mul(args[1], ir.Constant(args[1].type, 2)), _i16)
        return _h2f(builder, builder.load(p, align=1))

    return types.float32(w, i), codegen


@intrinsic
def ld_bf16_elem(typingctx, w, i):
    """Element i of a row of bfloat16 stored as bytes, as float32 (exact)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], builder.mul(args[1], ir.Constant(args[1].type, 2)), _i16)
        v = builder.shl(builder.zext(builder.load(p, align=1), _i32), ir.Constant(_i32, 16))
        return builder.bitcast(v, _f32)

    return types.float32(w, i), codegen


@intrinsic
def ld_f32_elem(typingctx, w, i):
    """Element i of a row of float32 stored as bytes (unaligned-safe)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], builder.mul(args[1], ir.Constant(args[1].type, 4)), _f32)
        return builder.load(p, align=1)

    return types.float32(w, i), codegen


# The decorator of a kernel's piece that its caller must absorb: a per-super-block or per-run
# function LLVM left as a call (too large for its inliner once the AVX2 dots take three
# instructions each) passed its eight vector accumulators through the stack and reloaded its
# array arguments on every call. Inlined by Numba, with the same operations in the same order
# (same bits): one thread from L2, Q6_K four tokens 17-20 -> 34-36 GMAC/s on the AVX2 path,
# one token 24-29 -> 29-34 GB/s with AVX-512 (docs/performance.md, twenty-sixth session).
inlined = njit(inline="always")

# ---------------------------------------------------------------- prefetch

# How far ahead of the current block the kernels prefetch weight bytes. Decode streams
# each weight once, and the per-block work is long enough that the out-of-order window
# covers only a few cache lines, which capped DRAM streaming at ~3 GB/s per core;
# software prefetch a few KiB ahead restores several times that. The one-token block kernels
# (`token_rows`) hint every line of the tile this far ahead into L2 (`prefetch_l2`).
PREFETCH_BYTES = 4096
# ... and, for the 4- and 5-bit formats, every line again this far ahead into L1 (`prefetch`),
# from L2 by then: a miss buffer then waits on L2, not memory. Cycle counters in qwen2.5-coder's
# decode (twenty-second session): Q5_0 gate/up 27.3-28.1 -> 29.3-29.9 GB/s; 1-1.5 KiB, 3 KiB and
# one line a tile measured no better; Q8_0 (272-byte tiles) no better either, so it has none.
PREFETCH_BYTES_L1 = 2048
# The K-quant decode kernels (`token_rows_k`) hint a whole super-block tile at once (18-27 lines
# of eight rows): 4 KiB ahead that burst sat 2.4-3.6 tiles out, and their weights streamed
# slower than the other formats'. At 1 KiB, cycle counters in qwen2.5-coder's decode: Q4_K
# 19.6 -> 22.2 GB/s, Q6_K 18.0 -> 21.3 (512 B: 21.8 and 20.4; 2 KiB: 21.9 and 20.1); whole
# decode +2% on the AVX-512 and the forced AVX2 path (Intel Xeon; docs/performance.md,
# seventeenth session).
PREFETCH_BYTES_K = 1024
# ... with each line of the tile this far ahead hinted into L2 first (`prefetch_l2`), so the burst
# into L1 waits on L2, not memory: flush-cold streams Q4_K 0.81-0.87 -> 0.97-0.98 of a plain
# read, Q6_K 0.85-0.90 -> 0.88-0.95 (2 KiB less; 4 KiB as good for Q4_K, less for Q6_K); in
# qwen2.5-coder's decode Q4_K 23-25 -> 27-28 GB/s, Q6_K 25-26 -> 26-27 (twenty-second session).
PREFETCH_BYTES_K_L2 = 3072
# Which of those hints a decode kernel gives, by the host's core. Measured on an AMD EPYC (Zen 5),
# two threads streaming each format from memory, alternated with the hints of the Intel Xeon
# where the distances above were measured (twenty-fourth session): without the L1 hints the
# 4- and 5-bit block formats streamed as fast or faster (Q5_0 49-57 -> 50-60 GB/s, Q4_1 56-68 ->
# 61-72); without any hint Q4_K went 45-46 -> 58-61 on the AVX-512 path and 50-54 -> 51-62 on
# the AVX2 one; Q6_K keeps its L2 hints (without them its AVX2 path fell 45-47 -> 31-48; L2 alone
# 49-54).
HINT_BLOCKS_L1: bool = not HOST_IS_ZEN
# On Zen the block kernels' L2 hints (`token_rows`) go this far ahead. A thread has at most the
# hinted bytes in flight, so 4 KiB at ~130 ns a loaded miss capped it near 31 GB/s: smollm2:135m's
# matmuls held at 59-63 GB/s in the minutes this host's memory read 90-116, and at 8-16 KiB they
# reached 67-72 there; in slower minutes, and on gemma3:270m and qwen2.5-coder:0.5b, the distance
# changed nothing (AMD EPYC, Zen 5; docs/performance.md, twenty-seventh session)
PREFETCH_BYTES_BLOCKS: int = 12288 if HOST_IS_ZEN else PREFETCH_BYTES
HINT_Q4_K: bool = not HOST_IS_ZEN
HINT_K_L1: bool = not HOST_IS_ZEN
# the intrinsic's name mangles the pointer type: typed i8* before LLVM 17, opaque after
_PREFETCH = "llvm.prefetch.p0" if llb.llvm_version_info[0] >= 17 else "llvm.prefetch.p0i8"


def _prefetch(locality: int, doc: str):
    def hint(typingctx, w, off):
        if not _is_u8_array(w):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], _i8)
            fnty = ir.FunctionType(ir.VoidType(), [p.type, _i32, _i32, _i32])
            fn = builder.module.globals.get(_PREFETCH) or ir.Function(builder.module, fnty, _PREFETCH)
            # read, this locality, data cache
            builder.call(fn, [p, ir.Constant(_i32, 0), ir.Constant(_i32, locality), ir.Constant(_i32, 1)])
            return context.get_dummy_value()

        return types.none(w, off), codegen

    hint.__doc__ = doc
    return intrinsic(hint)


prefetch = _prefetch(3, "Hint the cache line holding w[off] into L1 (no fault past the array's end).")
# x86 `prefetcht1`. A hint into L1 holds one of the core's few L1 miss buffers until its line
# arrives from memory; one into L2 does not, so a kernel can hint every line of what it reads
# next without starving its own loads (`token_rows`; docs/performance.md, twenty-first session)
prefetch_l2 = _prefetch(2, "Hint the cache line holding w[off] into L2, not L1 (no fault past the array's end).")


# ---------------------------------------------------------------- f32x16


@intrinsic
def vzero(typingctx):
    """All-zero f32x16."""

    def codegen(context, builder, sig, args):
        return ir.Constant(_vf, None)

    return f32x16(), codegen


@intrinsic
def vadd(typingctx, a, b):
    """a + b, lane-wise."""
    if a != f32x16 or b != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1], flags=_FAST)

    return f32x16(a, b), codegen


@intrinsic
def vhsum(typingctx, v):
    """Sum of the 16 lanes (a log2 tree of shuffles; one per row, not per block)."""
    if v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return _tree_sum(builder, args[0], _FAST)

    return types.float32(v), codegen


@intrinsic
def vst_hsum4(typingctx, out, oo, a, b, c, d):
    """out[oo:oo+4] = the lane sums of a, b, c and d: one tree for four vectors (9 shuffles and
    5 adds where four `vhsum`s take 16 of each; attention scores four keys at a time)."""
    if not _is_f32_array(out) or any(v != f32x16 for v in (a, b, c, d)):
        return None

    def codegen(context, builder, sig, args):
        def shuf(x, y, idx):
            return builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(_i32, len(idx)), idx))

        def halves(x, y):  # lanes 0-7: x's two halves added; 8-15: y's
            lo = shuf(x, y, list(range(8)) + list(range(16, 24)))
            hi = shuf(x, y, list(range(8, 16)) + list(range(24, 32)))
            return builder.fadd(lo, hi, flags=_FAST)

        ab, cd = halves(args[2], args[3]), halves(args[4], args[5])
        quarters = [k for q in range(0, 32, 8) for k in range(q, q + 4)]  # 0-3, 8-11, 16-19, 24-27
        s = builder.fadd(shuf(ab, cd, quarters), shuf(ab, cd, [k + 4 for k in quarters]), flags=_FAST)
        s = builder.fadd(s, shuf(s, s, [k ^ 2 for k in range(16)]), flags=_FAST)
        s = builder.fadd(s, shuf(s, s, [k ^ 1 for k in range(16)]), flags=_FAST)
        four = shuf(s, s, [0, 4, 8, 12])
        builder.store(four, _ptr(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_f32, 4)), align=4)
        return context.get_dummy_value()

    return types.none(out, oo, a, b, c, d), codegen


@intrinsic
def vfma_s(typingctx, acc, t, s):
    """acc + t * s for a scalar s (applies one block scale to a 16-lane partial dot)."""
    if acc != f32x16 or t != f32x16 or not isinstance(s, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        sv = _splat(builder, _as_f32(context, builder, args[2], sig.args[2]), _vf)
        return builder.fadd(args[0], builder.fmul(args[1], sv, flags=_FAST), flags=_FAST)

    return f32x16(acc, t, s), codegen


@intrinsic
def vdot_x(typingctx, q, x, xo):
    """float(q) * x[xo:xo+16]."""
    if q != i32x16 or not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], _vf), align=4)
        return builder.fmul(builder.sitofp(args[0], _vf), xv, flags=_FAST)

    return f32x16(q, x, xo), codegen


@intrinsic
def vfma_x(typingctx, acc, q, x, xo):
    """acc + float(q) * x[xo:xo+16]."""
    if acc != f32x16 or q != i32x16 or not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vf), align=4)
        t = builder.fmul(builder.sitofp(args[1], _vf), xv, flags=_FAST)
        return builder.fadd(args[0], t, flags=_FAST)

    return f32x16(acc, q, x, xo), codegen


@intrinsic
def vmadd_x(typingctx, acc, q, x, xo, s):
    """acc + (float(q) * s) * x[xo:xo+16] (one scale per 16 quants: K-quant sub-blocks)."""
    if acc != f32x16 or q != i32x16 or not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vf), align=4)
        sv = _splat(builder, _as_f32(context, builder, args[4], sig.args[4]), _vf)
        t = builder.fmul(builder.sitofp(args[1], _vf), sv, flags=_FAST)
        return builder.fadd(args[0], builder.fmul(t, xv, flags=_FAST), flags=_FAST)

    return f32x16(acc, q, x, xo, s), codegen


@intrinsic
def vfma_vx(typingctx, acc, v, x, xo):
    """acc + v * x[xo:xo+16] (float weights)."""
    if acc != f32x16 or v != f32x16 or not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vf), align=4)
        return builder.fadd(args[0], builder.fmul(args[1], xv, flags=_FAST), flags=_FAST)

    return f32x16(acc, v, x, xo), codegen


@intrinsic
def vaffine(typingctx, q, s, b):
    """float(q) * s + b: a dequantized 16-quant run."""
    if q != i32x16:
        return None

    def codegen(context, builder, sig, args):
        sv = _splat(builder, _as_f32(context, builder, args[1], sig.args[1]), _vf)
        bv = _splat(builder, _as_f32(context, builder, args[2], sig.args[2]), _vf)
        return builder.fadd(builder.fmul(builder.sitofp(args[0], _vf), sv, flags=_FAST), bv, flags=_FAST)

    return f32x16(q, s, b), codegen


@intrinsic
def vst(typingctx, out, oo, v):
    """out[oo:oo+16] = v (out float32; unaligned store)."""
    if not _is_f32_array(out) or v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], _vf), align=4)
        return context.get_dummy_value()

    return types.none(out, oo, v), codegen


@intrinsic
def vld_f16(typingctx, w, off):
    """16 halfs at bytes w[off:off+32] as f32x16."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vh), align=1)
        return _h2f(builder, h)

    return f32x16(w, off), codegen


@intrinsic
def vst_f16(typingctx, w, off, v):
    """w[off:off+32] = the 16 lanes of v as IEEE halfs, rounded to nearest even (NumPy's
    float32 to float16), through F16C's vcvtps2ph: callers check HAS_F16C."""
    if not _is_u8_array(w) or v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        h = builder.bitcast(builder.fptrunc(args[2], ir.VectorType(ir.HalfType(), LANES)), _vh)
        builder.store(h, _ptr(context, builder, sig.args[0], args[0], args[1], _vh), align=1)
        return context.get_dummy_value()

    return types.none(w, off, v), codegen


@intrinsic
def f16_bits(typingctx, x):
    """x (float32) as IEEE half bits, rounded as `vst_f16` rounds."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), _i16)

    return types.uint16(x), codegen


@intrinsic
def vfma_vh(typingctx, acc, v, w, off):
    """acc + v * (16 halfs at bytes w[off:off+32]), as `vfma_vx` on float16 values."""
    if acc != f32x16 or v != f32x16 or not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        h = _h2f(builder, builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vh), align=1))
        return builder.fadd(args[0], builder.fmul(args[1], h, flags=_FAST), flags=_FAST)

    return f32x16(acc, v, w, off), codegen


@intrinsic
def vld_bf16(typingctx, w, off):
    """16 bfloat16 at bytes w[off:off+32] as f32x16 (shift into the high half of each lane)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vh), align=1)
        v = builder.shl(builder.zext(h, _vi), _splat(builder, ir.Constant(_i32, 16), _vi))
        return builder.bitcast(v, _vf)

    return f32x16(w, off), codegen


@intrinsic
def vld_f32b(typingctx, w, off):
    """16 float32 at bytes w[off:off+64] as f32x16."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vf), align=1)

    return f32x16(w, off), codegen


# ---------------------------------------------------------------- i32x16 quant unpacking


@intrinsic
def vq(typingctx, w, off, shift, mask):
    """(w[off:off+16] >> shift) & mask, each byte zero-extended to an int32 lane."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = builder.zext(builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb), align=1), _vi)
        s = _splat(builder, _as_i32(context, builder, args[2], sig.args[2]), _vi)
        m = _splat(builder, _as_i32(context, builder, args[3], sig.args[3]), _vi)
        return builder.and_(builder.lshr(v, s), m)

    return i32x16(w, off, shift, mask), codegen


@intrinsic
def vq8(typingctx, w, off):
    """w[off:off+16] as signed int8, sign-extended to int32 lanes."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb), align=1)
        return builder.sext(v, _vi)

    return i32x16(w, off), codegen


@intrinsic
def vbits32(typingctx, w, off, first, shl):
    """Lane i = ((u32 at w[off:off+4] >> (first + i)) & 1) << shl: the 5th bit of Q5_0/Q5_1 quants."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        u = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _i32), align=1)
        uv = _splat(builder, u, _vi)
        f = _as_i32(context, builder, args[2], sig.args[2])
        sh = builder.add(_splat(builder, f, _vi), ir.Constant(_vi, list(range(LANES))))
        bit = builder.and_(builder.lshr(uv, sh), ir.Constant(_vi, [1] * LANES))
        return builder.shl(bit, _splat(builder, _as_i32(context, builder, args[3], sig.args[3]), _vi))

    return i32x16(w, off, first, shl), codegen


@intrinsic
def vor(typingctx, a, b):
    """a | b, lane-wise."""
    if a != i32x16 or b != i32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.or_(args[0], args[1])

    return i32x16(a, b), codegen


@intrinsic
def vshl(typingctx, a, k):
    """a << k, lane-wise."""
    if a != i32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.shl(args[0], _splat(builder, _as_i32(context, builder, args[1], sig.args[1]), _vi))

    return i32x16(a, k), codegen


@intrinsic
def vsubk(typingctx, a, k):
    """a - k, lane-wise, for a scalar k (removes a quant format's zero offset)."""
    if a != i32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.sub(args[0], _splat(builder, _as_i32(context, builder, args[1], sig.args[1]), _vi))

    return i32x16(a, k), codegen


# ---------------------------------------------------------------- activation quantization


def _llvm_fn(builder, name, ret, args):
    fn = builder.module.globals.get(name)
    return fn or ir.Function(builder.module, ir.FunctionType(ret, args), name)


def _dpbusd512(builder, acc, u, s):
    """acc + the 512-bit `vpdpbusd` of unsigned bytes u and signed bytes s (sixteen dword lanes)."""
    fn = _llvm_fn(builder, "llvm.x86.avx512.vpdpbusd.512", _vi, [_vi, _vi, _vi])
    return builder.call(fn, [acc, builder.bitcast(u, _vi), s])


@intrinsic
def xsum16(typingctx, x, i):
    """sum(x[16i:16i+16]) in one vector load and a tree reduction."""
    if not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        i64 = context.cast(builder, args[1], sig.args[1], types.intp)
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], builder.mul(i64, ir.Constant(i64.type, 16)), _vf), align=4)
        return _tree_sum(builder, v, _FAST)

    return types.float32(x, i), codegen


@intrinsic
def q8_block(typingctx, x, b, xq, xd, xc16, xc32, xi32):
    """Quantize x[32b:32b+32] to int8: d = max|x|/127, xq = rint(x/d), xd[b] = d.

    Also xc16[2b+k] = d * sum of the k-th 16 quants and xc32[b] = their sum: the x side
    of the zero-offset corrections, precomputed so a kernel spends one FMA on them; and
    xi32[b] = -128 times the integer sum of the 32 quants, stored as int32 bits in the float
    array, for kernels that correct an offset before their integer sums leave the integers
    (Q8_0's q + 128 dots: one vector add of a loaded value, no conversion a block).
    """
    if not (_is_f32_array(x) and _is_i8_array(xq) and _is_f32_array(xd)):
        return None
    if not (_is_f32_array(xc16) and _is_f32_array(xc32) and _is_f32_array(xi32)):
        return None

    def codegen(context, builder, sig, args):
        xa, bi, xqa, xda, c16, c32, i32 = args
        b64 = context.cast(builder, bi, sig.args[1], types.intp)
        e0 = builder.mul(b64, ir.Constant(b64.type, 32))
        e1 = builder.add(e0, ir.Constant(b64.type, 16))
        v0 = builder.load(_ptr(context, builder, sig.args[0], xa, e0, _vf), align=4)
        v1 = builder.load(_ptr(context, builder, sig.args[0], xa, e1, _vf), align=4)
        rint = _llvm_fn(builder, "llvm.rint.v16f32", _vf, [_vf])
        radd = _llvm_fn(builder, "llvm.vector.reduce.add.v16i32", _i32, [_vi])
        # max|x| as the unsigned maximum of the sign-cleared bits: for floats that are not NaN the
        # bits order as the values, so it is the very float `maxnum` gives, and the reduction is a
        # tree of integer maxima. The float reduction (`reduce.fmax`, which must skip NaNs) came
        # out as fifteen dependent scalar max-and-NaN-test steps a block: ~60 cycles a block,
        # 0.3-1 us a decode matmul's activations on each thread. A NaN in x now makes d NaN
        # (the block's products NaN, as a float product would be), where it was skipped.
        umax = _llvm_fn(builder, "llvm.umax.v16i32", _vi, [_vi, _vi])
        rumax = _llvm_fn(builder, "llvm.vector.reduce.umax.v16i32", _i32, [_vi])
        magnitude = ir.Constant(_vi, [0x7FFFFFFF] * LANES)
        a0 = builder.and_(builder.bitcast(v0, _vi), magnitude)
        a1 = builder.and_(builder.bitcast(v1, _vi), magnitude)
        amax = builder.bitcast(builder.call(rumax, [builder.call(umax, [a0, a1])]), _f32)
        d = builder.fdiv(amax, ir.Constant(_f32, 127.0))
        pos = builder.fcmp_ordered(">", d, ir.Constant(_f32, 0.0))
        inv = builder.select(pos, builder.fdiv(ir.Constant(_f32, 1.0), d), ir.Constant(_f32, 0.0))
        iv = _splat(builder, inv, _vf)
        builder.store(d, _ptr(context, builder, sig.args[3], xda, b64, _f32))
        sums = []
        isum = ir.Constant(_i32, 0)
        for k, (v, e) in enumerate(((v0, e0), (v1, e1))):
            q = builder.fptosi(builder.call(rint, [builder.fmul(v, iv)]), _vi)
            builder.store(builder.trunc(q, _vb), _ptr(context, builder, sig.args[2], xqa, e, _vb), align=1)
            qsum = builder.call(radd, [q])
            isum = builder.add(isum, qsum)
            c = builder.fmul(builder.sitofp(qsum, _f32), d)
            g = builder.add(builder.mul(b64, ir.Constant(b64.type, 2)), ir.Constant(b64.type, k))
            builder.store(c, _ptr(context, builder, sig.args[4], c16, g, _f32))
            sums.append(c)
        builder.store(builder.fadd(sums[0], sums[1]), _ptr(context, builder, sig.args[5], c32, b64, _f32))
        builder.store(builder.mul(isum, ir.Constant(_i32, -128)), _ptr(context, builder, sig.args[6], i32, b64, _i32))
        return context.get_dummy_value()

    return types.none(x, b, xq, xd, xc16, xc32, xi32), codegen


# ---------------------------------------------------------------- int8 dot (q8 activations)
#
# A 32-quant block is unpacked into 32 *unsigned* bytes (formats with a zero offset,
# e.g. Q4_0's q-8, are corrected once per block with the int sum of x's quants) and
# dotted with 32 int8 activations by one u8*s8 dot-accumulate: vpdpbusd where the CPU
# has VNNI, else a generic widening multiply. Byte-domain unpacking handles 32 quants
# per instruction and the dot needs no int->float conversion per quant, which is why
# this beats the float kernels where VNNI exists.


@intrinsic
def b_nib(typingctx, w, off):
    """32 quants of a 4-bit block: low nibbles of w[off:off+16] then the high nibbles."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb), align=1)
        lo = builder.and_(v, ir.Constant(_vb, [15] * LANES))
        hi = builder.lshr(v, ir.Constant(_vb, [4] * LANES))
        return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))

    return i8x32(w, off), codegen


@intrinsic
def b_crumbs(typingctx, w, off, shift, mask):
    """(w[off:off+32] >> shift) & mask as 32 byte lanes (bit planes of K-quants)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb32), align=1)
        s = _splat(builder, context.cast(builder, args[2], sig.args[2], types.uint8), _vb32)
        m = _splat(builder, context.cast(builder, args[3], sig.args[3], types.uint8), _vb32)
        return builder.and_(builder.lshr(v, s), m)

    return i8x32(w, off, shift, mask), codegen


@intrinsic
def b_bitsel(typingctx, w, off, bit, val):
    """Lane l = val if bit `bit` of w[off+l] is set else 0, for l < 32 (hmask/qh planes)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb32), align=1)
        b = context.cast(builder, args[2], sig.args[2], types.uint8)
        m = _splat(builder, builder.shl(ir.Constant(_i8, 1), b), _vb32)
        on = builder.icmp_unsigned("!=", builder.and_(v, m), ir.Constant(_vb32, None))
        val = _splat(builder, context.cast(builder, args[3], sig.args[3], types.uint8), _vb32)
        return builder.select(on, val, ir.Constant(_vb32, None))

    return i8x32(w, off, bit, val), codegen


@intrinsic
def b_hbits16(typingctx, w, off):
    """Lane i = 16 if bit i of the u32 at w[off:off+4] is set else 0 (Q5_0/Q5_1 5th bit)."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        u = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _i32), align=1)
        m = builder.bitcast(u, ir.VectorType(ir.IntType(1), 32))
        return builder.select(m, ir.Constant(_vb32, [16] * 32), ir.Constant(_vb32, None))

    return i8x32(w, off), codegen


@intrinsic
def b_load(typingctx, w, off):
    """32 raw bytes w[off:off+32]."""
    if not _is_u8_array(w):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vb32), align=1)

    return i8x32(w, off), codegen


@intrinsic
def b_or(typingctx, a, b):
    """a | b on byte lanes."""
    if a != i8x32 or b != i8x32:
        return None

    def codegen(context, builder, sig, args):
        return builder.or_(args[0], args[1])

    return i8x32(a, b), codegen


@intrinsic
def b_shl(typingctx, a, k):
    """a << k on byte lanes."""
    if a != i8x32:
        return None

    def codegen(context, builder, sig, args):
        return builder.shl(args[0], _splat(builder, context.cast(builder, args[1], sig.args[1], types.uint8), _vb32))

    return i8x32(a, k), codegen


@intrinsic
def vz8(typingctx):
    """All-zero f32x8."""

    def codegen(context, builder, sig, args):
        return ir.Constant(_vf8, None)

    return f32x8(), codegen


@intrinsic
def vadd8(typingctx, a, b):
    """a + b on f32x8."""
    if a != f32x8 or b != f32x8:
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1], flags=_FAST)

    return f32x8(a, b), codegen


@intrinsic
def vhsum8(typingctx, v):
    """Sum of the 8 lanes."""
    if v != f32x8:
        return None

    def codegen(context, builder, sig, args):
        return _tree_sum(builder, args[0], _FAST)

    return types.float32(v), codegen


def _sign_trick(builder, q, x):
    """(|q|, x with q's signs; 0 where q is 0) on 32 byte lanes: llama.cpp's sign trick, which
    dots signed quants by an unsigned-by-signed product (|q| <= 128 keeps AVX2's pair sums
    exact). On AVX2 `vpabsb` and `vpsignb`, which LLVM does not find in the selects below (it
    builds a compare, an xor and a subtract: 9 instructions a Q8_0 step instead of 7)."""
    if HAS_AVX2:
        u = builder.call(_llvm_fn(builder, "llvm.abs.v32i8", _vb32, [_vb32, ir.IntType(1)]),
                         [q, ir.Constant(ir.IntType(1), 0)])  # -128 stays 0x80: the unsigned 128
        return u, builder.call(_llvm_fn(builder, "llvm.x86.avx2.psign.b", _vb32, [_vb32, _vb32]), [x, q])
    zero = ir.Constant(_vb32, None)
    neg = builder.icmp_signed("<", q, zero)
    u = builder.select(neg, builder.sub(zero, q), q)
    sx = builder.select(neg, builder.sub(zero, x), builder.select(builder.icmp_signed("==", q, zero), zero, x))
    return u, sx


def _dpbusd(builder, u, s):
    """8 int32 lanes, lane i = sum_k u8(u[4i+k]) * s8(s[4i+k]).

    Without VNNI, AVX2's vpmaddubsw (adjacent u8*s8 pairs summed into int16, saturating) then
    vpmaddwd by ones. Exact only while a pair sum stays below 2^15: every caller's unsigned
    quants are at most 63 (Q6_K), or at most 128 from `vdps`'s sign trick, against |s| <= 127.
    """
    if HAS_VNNI:
        fnty = ir.FunctionType(_vi8, [_vi8, _vi8, _vi8])
        name = "llvm.x86.avx512.vpdpbusd.256"  # also selects the VEX (AVX-VNNI) encoding
        fn = builder.module.globals.get(name) or ir.Function(builder.module, fnty, name)
        return builder.call(fn, [ir.Constant(_vi8, None), builder.bitcast(u, _vi8), builder.bitcast(s, _vi8)])
    if HAS_AVX2:
        vh16 = ir.VectorType(_i16, 16)
        pairs = builder.call(_llvm_fn(builder, "llvm.x86.avx2.pmadd.ub.sw", vh16, [_vb32, _vb32]), [u, s])
        ones = ir.Constant(vh16, [1] * 16)
        return builder.call(_llvm_fn(builder, "llvm.x86.avx2.pmadd.wd", _vi8, [vh16, vh16]), [pairs, ones])
    m = builder.mul(builder.zext(u, _vi32x32), builder.sext(s, _vi32x32), flags=("nsw",))
    parts = [builder.shuffle_vector(m, m, ir.Constant(_vi8, list(range(k, 32, 4)))) for k in range(4)]
    return builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3]))


@intrinsic
def vdp(typingctx, acc, a, xq, xo, s):
    """acc + float(dot4(a, xq[xo:xo+32])) * s: one 32-quant block, scale s = d_w * d_x."""
    if acc != f32x8 or a != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vb32), align=1)
        d = builder.sitofp(_dpbusd(builder, args[1], xv), _vf8)
        sv = _splat(builder, _as_f32(context, builder, args[4], sig.args[4]), _vf8)
        return builder.fadd(args[0], builder.fmul(d, sv, flags=_FAST), flags=_FAST)

    return f32x8(acc, a, xq, xo, s), codegen


@intrinsic
def vdps(typingctx, acc, a, xq, xo, s):
    """As `vdp` for 32 *signed* int8 quants a (Q8_0): dotted as |a| with x's signs moved
    over (llama.cpp's sign trick), which keeps AVX2's saturating pair sums exact."""
    if acc != f32x8 or a != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vb32), align=1)
        d = builder.sitofp(_dpbusd(builder, *_sign_trick(builder, args[1], xv)), _vf8)
        sv = _splat(builder, _as_f32(context, builder, args[4], sig.args[4]), _vf8)
        return builder.fadd(args[0], builder.fmul(d, sv, flags=_FAST), flags=_FAST)

    return f32x8(acc, a, xq, xo, s), codegen


@intrinsic
def vdp2(typingctx, acc, a, xq, xo, s0, s1):
    """As `vdp` with scale s0 on quants 0-15 and s1 on 16-31 (16-quant scale groups)."""
    if acc != f32x8 or a != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vb32), align=1)
        d = builder.sitofp(_dpbusd(builder, args[1], xv), _vf8)
        v4 = ir.VectorType(_f32, 4)
        lo = _splat(builder, _as_f32(context, builder, args[4], sig.args[4]), v4)
        hi = _splat(builder, _as_f32(context, builder, args[5], sig.args[5]), v4)
        sv = builder.shuffle_vector(lo, hi, ir.Constant(_vi8, list(range(8))))
        return builder.fadd(args[0], builder.fmul(d, sv, flags=_FAST), flags=_FAST)

    return f32x8(acc, a, xq, xo, s0, s1), codegen


# ---------------------------------------------------------------- exact int8 dots (grouped decode)
#
# The grouped int8 kernels (`_grouped_q8.py`) unpack a 32-quant run once and dot it with each
# token's int8 activations. As with the f32x16 kernels below, a token's bits must not depend on
# its group, so these carry no fast-math flags: the block's integer dot is exact, and it joins the
# float accumulator through one explicit `llvm.fma`.


def _fma(builder, a, b, c):
    """llvm.fma on float vectors of any width (a's): exact, whatever the lane count."""
    vty = a.type
    return builder.call(_llvm_fn(builder, f"llvm.fma.v{vty.count}f32", vty, [vty, vty, vty]), [a, b, c])


# The float steps every int8 row kernel ends a block with, on eight rows (f32x8, i32x8) or sixteen
# (f32x16, i32x16): one definition, so a row's bits are the same whichever width computed it.
_WIDTHS = {f32x8: (i32x8, _vf8), f32x16: (i32x16, _vf)}


def _scalar_splat(context, builder, sig, args, i, vty):
    return _splat(builder, context.cast(builder, args[i], sig.args[i], types.float32), vty)


@intrinsic
def dot_add(typingctx, acc, dot, s, dx):
    """fma(float(dot), s * dx, acc) lane by lane: a run's exact integer sums, scaled per row and
    by x's scale."""
    if acc not in _WIDTHS or dot != _WIDTHS[acc][0] or s != acc:
        return None
    vty = _WIDTHS[acc][1]

    def codegen(context, builder, sig, args):
        sx = builder.fmul(args[2], _scalar_splat(context, builder, sig, args, 3, vty))
        return _fma(builder, builder.sitofp(args[1], vty), sx, args[0])

    return acc(acc, dot, s, dx), codegen


@intrinsic
def offset_add(typingctx, acc, s, c):
    """fma(s, c, acc) lane by lane: rows' offsets (or scales) times one sum of x."""
    if acc not in _WIDTHS or s != acc:
        return None
    vty = _WIDTHS[acc][1]

    def codegen(context, builder, sig, args):
        return _fma(builder, args[1], _scalar_splat(context, builder, sig, args, 2, vty), args[0])

    return acc(acc, s, c), codegen


@intrinsic
def store_rows(typingctx, out, oo, acc, tail, c):
    """out[oo:oo+n] = acc + tail * c for n = 8 or 16 lanes (c a power of two or 0: the product is
    exact)."""
    if not _is_f32_array(out) or acc not in _WIDTHS or tail != acc:
        return None
    vty = _WIDTHS[acc][1]

    def codegen(context, builder, sig, args):
        v = builder.fadd(args[2], builder.fmul(args[3], _scalar_splat(context, builder, sig, args, 4, vty)))
        builder.store(v, _ptr(context, builder, sig.args[0], args[0], args[1], vty), align=4)
        return context.get_dummy_value()

    return types.none(out, oo, acc, tail, c), codegen


def _halves(context, builder, sig, args, i):
    # lanes 0-3 (quants 0-15) scaled by args[i], lanes 4-7 (quants 16-31) by args[i + 1]
    v4 = ir.VectorType(_f32, 4)
    lo = _splat(builder, _as_f32(context, builder, args[i], sig.args[i]), v4)
    hi = _splat(builder, _as_f32(context, builder, args[i + 1], sig.args[i + 1]), v4)
    return builder.shuffle_vector(lo, hi, ir.Constant(_vi8, list(range(8))))


@intrinsic
def qfma(typingctx, acc, a, xq, xo, s0, s1):
    """fma(float(dot4(a, xq[xo:xo+32])), s, acc) for 32 unsigned quants a, exactly: s is s0 on
    quants 0-15 and s1 on 16-31 (pass s0 twice for one scale per 32)."""
    if acc != f32x8 or a != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vb32), align=1)
        d = builder.sitofp(_dpbusd(builder, args[1], xv), _vf8)
        return _fma(builder, d, _halves(context, builder, sig, args, 4), args[0])

    return f32x8(acc, a, xq, xo, s0, s1), codegen


@intrinsic
def qfmas(typingctx, acc, u, a, xq, xo, s):
    """As `qfma` for 32 *signed* quants a (Q8_0) given u = |a| (`b_abs`, once per run): x takes
    a's signs, so the pair sums stay exact on AVX2 (u <= 128, |x| <= 127)."""
    if acc != f32x8 or a != i8x32 or u != i8x32 or not _is_i8_array(xq):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[3], args[3], args[4], _vb32), align=1)
        zero = ir.Constant(_vb32, None)
        sx = builder.select(builder.icmp_signed("<", args[2], zero), builder.sub(zero, xv), xv)
        d = builder.sitofp(_dpbusd(builder, args[1], sx), _vf8)
        sv = _splat(builder, _as_f32(context, builder, args[5], sig.args[5]), _vf8)
        return _fma(builder, d, sv, args[0])

    return f32x8(acc, u, a, xq, xo, s), codegen


@intrinsic
def b_abs(typingctx, a):
    """|a| on signed byte lanes (-128 becomes the unsigned byte 128)."""
    if a != i8x32:
        return None

    def codegen(context, builder, sig, args):
        zero = ir.Constant(_vb32, None)
        return builder.select(builder.icmp_signed("<", args[0], zero), builder.sub(zero, args[0]), args[0])

    return i8x32(a), codegen


@intrinsic
def qhsum(typingctx, v):
    """Sum of the 8 lanes by a fixed halving tree (the same order in every caller)."""
    if v != f32x8:
        return None

    def codegen(context, builder, sig, args):
        return _tree_sum(builder, args[0], ())

    return types.float32(v), codegen


# ---------------------------------------------------------------- exact f32x16 (no fast-math flags)
#
# The grouped kernels (`_grouped.py`) must give each token bit-identical results whether it is
# multiplied alone or beside other tokens. The intrinsics above carry LLVM's `fast` flags, which
# let the optimizer reassociate differently in each calling context; these carry none, and fuse
# multiply-adds only through an explicit `llvm.fma`, so the rounding sequence is what the source
# says in every context.


@intrinsic
def xfma(typingctx, acc, v, x, xo):
    """fma(v, x[xo:xo+16], acc), one rounding, no reassociation."""
    if acc != f32x16 or v != f32x16 or not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        xv = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _vf), align=4)
        return _fma(builder, args[1], xv, args[0])

    return f32x16(acc, v, x, xo), codegen


@intrinsic
def xaffine(typingctx, q, s, b):
    """fma(float(q), s, b): 16 dequantized weights (scale s, offset b) with one rounding."""
    if q != i32x16:
        return None

    def codegen(context, builder, sig, args):
        sv = _splat(builder, _as_f32(context, builder, args[1], sig.args[1]), _vf)
        bv = _splat(builder, _as_f32(context, builder, args[2], sig.args[2]), _vf)
        return _fma(builder, builder.sitofp(args[0], _vf), sv, bv)

    return f32x16(q, s, b), codegen


@intrinsic
def xscale(typingctx, q, s):
    """float(q) * s: 16 dequantized weights of a format without an offset."""
    if q != i32x16:
        return None

    def codegen(context, builder, sig, args):
        sv = _splat(builder, _as_f32(context, builder, args[1], sig.args[1]), _vf)
        return builder.fmul(builder.sitofp(args[0], _vf), sv)

    return f32x16(q, s), codegen


@intrinsic
def xadd(typingctx, a, b):
    """a + b, lane-wise, IEEE order."""
    if a != f32x16 or b != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return f32x16(a, b), codegen


@intrinsic
def xhsum(typingctx, v):
    """Sum of the 16 lanes by a fixed halving tree (the same order in every caller)."""
    if v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return _tree_sum(builder, args[0], ())

    return types.float32(v), codegen


@intrinsic
def vld(typingctx, x, xo):
    """x[xo:xo+16] of a float32 array as f32x16 (unaligned)."""
    if not _is_f32_array(x):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _vf), align=4)

    return f32x16(x, xo), codegen


def _exp16(builder, v):
    """exp of 16 f32 lanes (see `vexp`)."""
    def c(val):
        return ir.Constant(_vf, [val] * LANES)

    fmax = _llvm_fn(builder, "llvm.maxnum.v16f32", _vf, [_vf, _vf])
    fmin = _llvm_fn(builder, "llvm.minnum.v16f32", _vf, [_vf, _vf])
    rint = _llvm_fn(builder, "llvm.rint.v16f32", _vf, [_vf])
    x = builder.call(fmin, [builder.call(fmax, [v, c(-87.3)]), c(88.7)])
    n = builder.call(rint, [builder.fmul(x, c(1.44269504088896341))])
    r = _fma(builder, n, c(-0.693359375), x)
    r = _fma(builder, n, c(2.12194440e-4), r)
    p = c(1.9875691500e-4)
    for coef in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = _fma(builder, p, r, c(coef))
    y = builder.fadd(_fma(builder, p, builder.fmul(r, r), r), c(1.0))
    ni = builder.fptosi(n, _vi)
    scale = builder.bitcast(builder.shl(builder.add(ni, ir.Constant(_vi, [127] * LANES)),
                                        ir.Constant(_vi, [23] * LANES)), _vf)
    return builder.fmul(y, scale)


@intrinsic
def vexp(typingctx, v):
    """exp of 16 lanes: 2^n * p(r) with r = x - n ln2 and Cephes' degree-6 polynomial (~1 ulp).

    Inputs are clamped to [-87.3, 88.7], so results stay finite and lanes far below the
    maximum give ~1e-38 rather than 0 (what softmax needs: no inf, no NaN).
    """
    if v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return _exp16(builder, args[0])

    return f32x16(v), codegen


@intrinsic
def vsplat(typingctx, s):
    """s in all 16 lanes."""
    if not isinstance(s, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _splat(builder, _as_f32(context, builder, args[0], sig.args[0]), _vf)

    return f32x16(s), codegen


@intrinsic
def vsub(typingctx, a, b):
    """a - b, lane-wise."""
    if a != f32x16 or b != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fsub(args[0], args[1])

    return f32x16(a, b), codegen


@intrinsic
def vmul(typingctx, a, b):
    """a * b, lane-wise."""
    if a != f32x16 or b != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])

    return f32x16(a, b), codegen


@intrinsic
def vmax(typingctx, a, b):
    """The larger of a and b, lane-wise (exact: a maximum does not depend on the order taken)."""
    if a != f32x16 or b != f32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.call(_llvm_fn(builder, "llvm.maxnum.v16f32", _vf, [_vf, _vf]), [args[0], args[1]])

    return f32x16(a, b), codegen


@intrinsic
def vhmax(typingctx, v):
    """The largest of the 16 lanes."""
    if v != f32x16:
        return None

    def codegen(context, builder, sig, args):
        def larger(lo, hi):
            ty = lo.type
            return builder.call(_llvm_fn(builder, f"llvm.maxnum.v{ty.count}f32", ty, [ty, ty]), [lo, hi])

        return _tree_reduce(builder, args[0], larger)

    return types.float32(v), codegen


@intrinsic
def vgelu_mul(typingctx, g, u):
    """gelu(g) * u on 16 lanes, gelu by its tanh form: 0.5 g (1 + tanh(z)) = g / (1 + exp(-2z)),
    z = sqrt(2/pi) (g + 0.044715 g^3), so it costs one vector exp as silu does."""
    if g != f32x16 or u != f32x16:
        return None

    def codegen(context, builder, sig, args):
        g, u = args

        def c(val):
            return ir.Constant(_vf, [val] * LANES)
        # -2z = g * (k0 + k1 g^2), k0 = -2 sqrt(2/pi), k1 = 0.044715 k0
        k0 = -2.0 * math.sqrt(2.0 / math.pi)
        inner = _fma(builder, builder.fmul(g, g), c(0.044715 * k0), c(k0))
        e = _exp16(builder, builder.fmul(g, inner))
        den = builder.fadd(e, c(1.0))
        return builder.fmul(builder.fdiv(g, den), u)

    return f32x16(g, u), codegen


@intrinsic
def vsilu_mul(typingctx, g, u):
    """silu(g) * u = g / (1 + exp(-g)) * u on 16 lanes (divided first: g * u may overflow where
    the result does not)."""
    if g != f32x16 or u != f32x16:
        return None

    def codegen(context, builder, sig, args):
        g, u = args
        e = _exp16(builder, builder.fsub(ir.Constant(_vf, None), g))
        den = builder.fadd(e, ir.Constant(_vf, [1.0] * LANES))
        return builder.fmul(builder.fdiv(g, den), u)

    return f32x16(g, u), codegen
