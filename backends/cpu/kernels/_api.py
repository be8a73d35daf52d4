"""Entry points: decode matvec, prefill matmul, row dequantization.

All weights are uint8[rows, row_bytes] in their GGML format, as stored in the GGUF
file (see `raw_rows`). Activations and outputs are C-contiguous float32.

Everything but `matmul` is a Numba function, callable from Python and from other Numba
code. Numba code that runs its own `prange` (a whole-layer kernel) should call the
serial building blocks instead, one range of rows per task: `xa = prepare_x(x)` then
`dot_rows(code, w, x, xa, out, r0, r1)` (float activations), or
`xq, xa = prepare_x_q8(x)` then `qdot_rows(code, w, xq, xa, out, r0, r1)` (int8
activations), picking between them with `uses_q8(code)` as `matvec` does. One
prepared x serves every matrix it multiplies (q, k and v; gate and up).
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Callable

import numpy as np
from numba import literally, njit, prange

from . import formats as F
from ._grouped import GROUP_MAX, grouped_q8_rows, grouped_rows, has_grouped, has_grouped_q8
from ._interleaved import dequantize_tile as dequantize_interleaved_tile
from ._interleaved import interleaved_kernel
from .interleaved import ROWS
from ._q8 import qdot_rows, quantize_q8, quantize_rows
from ._rows import XA_ROWS, XD, deq_row, dot_rows, x_sums
from ._simd import HAS_AVX2, HAS_VNNI

# Rows per parallel task: small enough that 2..16 threads get balanced work on the
# smallest matrices (192-row k/v projections), large enough to amortize task overhead.
ROWS_PER_TASK = 16
# Rows of W dequantized per sgemm call in `matmul`. sgemm gains up to ~512 rows
# (T=256: 125 GFLOP/s at 64 rows, 137 at 128, 145-158 at 512, one core), so tiles are
# 512 rows unless that exceeds TILE_BYTES of float32.
TILE_ROWS = 512
TILE_BYTES = 8 << 20
# At or below this many tokens `matmul` skips BLAS and runs the decode kernels per
# token (each task's 16 weight rows stay in cache across tokens). One core, qwen
# ffn_up: the int8 path does 45-48 GFLOP/s at any T; tiles + OpenBLAS sgemm do 17-20 at
# T=2, 8-34 at T=3..16 (small-M sgemm is erratic), 55 at T=32 and 84 at T=64.
SMALL_T = 16
# Weights smaller than this (bytes) are multiplied on the calling thread: waking the
# pool costs ~1-2 us, about what 32 KiB of weights takes on one core.
SERIAL_BYTES = 32 * 1024

_par = njit(parallel=True, fastmath=True, cache=True)


@njit(cache=True)
def _block(code):
    # (elements, bytes) per block; GGML_QUANT_SIZES for the supported codes
    if code == F.Q4_0:
        return 32, 18
    if code == F.Q4_1:
        return 32, 20
    if code == F.Q5_0:
        return 32, 22
    if code == F.Q5_1:
        return 32, 24
    if code == F.Q8_0:
        return 32, 34
    if code == F.Q2_K:
        return 256, 84
    if code == F.Q3_K:
        return 256, 110
    if code == F.Q4_K:
        return 256, 144
    if code == F.Q5_K:
        return 256, 176
    if code == F.Q6_K:
        return 256, 210
    if code == F.F32:
        return 1, 4
    if code == F.F16 or code == F.BF16:
        return 1, 2
    return 0, 0


@njit(cache=True)
def _check(code, w, cols):
    # The SIMD loads do no bounds checks, so validate the geometry once here.
    elems, nbytes = _block(code)
    if elems == 0:
        raise ValueError("unsupported GGML weight type")
    if cols % elems != 0 or w.shape[1] != cols // elems * nbytes:
        raise ValueError("weight row bytes do not match the activation length for this type")


# Decode strategy per format, chosen from benchmarks/cpu_kernels.py: with VNNI (vpdpbusd) or
# AVX2 (vpmaddubsw + vpmaddwd) the int8-activation kernels win for every quantized format
# (byte-domain unpacking plus one or two dot instructions per 32 quants); elsewhere their
# generic fallback is slower than the exact float kernels, so those are used.
_Q8_DECODE = F.QUANTIZED if HAS_VNNI or HAS_AVX2 else ()
# as a bit mask over type codes, which Numba freezes into a constant
_Q8_MASK = sum(1 << c for c in _Q8_DECODE)


@njit(cache=True)
def uses_q8(code):
    """Whether `matvec` quantizes x to int8 for weights of format `code` on this CPU."""
    return 0 <= code < 63 and (_Q8_MASK >> code) & 1 == 1


@njit(cache=True)
def _is_float(code):
    return code == F.F32 or code == F.F16 or code == F.BF16


@njit(fastmath=True, cache=True)
def prepare_x(x):
    """The side array xa = float32[XA_ROWS, cols // 16] that `dot_rows` needs for x."""
    xa = np.empty((XA_ROWS, x.shape[0] // 16), np.float32)
    x_sums(x, xa)
    return xa


@njit(fastmath=True, cache=True)
def prepare_x_q8(x):
    """(xq, xa) for `qdot_rows`: x quantized to int8 per 32, and its side array."""
    xq = np.empty(x.shape[0], np.int8)
    xa = np.empty((XA_ROWS, x.shape[0] // 16), np.float32)
    quantize_q8(x, xq, xa)
    return xq, xa


@njit(parallel=True, fastmath=True, cache=True)
def _matvec_float(code, w, x, out):
    xa = prepare_x(x)
    rows = w.shape[0]
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        dot_rows(code, w, x, xa, out, r0, min(rows, r0 + ROWS_PER_TASK))


@njit(parallel=True, fastmath=True, cache=True)
def _matvec_q8(code, w, x, out):
    xq, xa = prepare_x_q8(x)
    rows = w.shape[0]
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        qdot_rows(code, w, xq, xa, out, r0, min(rows, r0 + ROWS_PER_TASK))


@njit(fastmath=True, cache=True)
def _matvec_serial(code, w, x, out, q8):
    # below SERIAL_BYTES the parallel region's wake-up costs more than it saves
    if q8:
        xq, xa = prepare_x_q8(x)
        qdot_rows(code, w, xq, xa, out, 0, w.shape[0])
    else:
        xa = prepare_x(x)
        dot_rows(code, w, x, xa, out, 0, w.shape[0])


@njit(cache=True)
def _check_mv(code, w, x, out):
    _check(code, w, x.shape[0])
    if out.shape[0] != w.shape[0]:
        raise ValueError("out length must equal the number of weight rows")


@njit(cache=True)
def _matvec(code, w, x, out, q8):
    if w.shape[0] * w.shape[1] < SERIAL_BYTES:
        _matvec_serial(code, w, x, out, q8)
    elif q8:
        _matvec_q8(code, w, x, out)
    else:
        _matvec_float(code, w, x, out)


@njit(cache=True)
def matvec(code, w, x, out):
    """out = W @ x for W in GGML format `code`, never materializing W in float.

    code: GGML type code (see `formats`); w: uint8[rows, row_bytes] (the GGUF bytes);
    x: float32[cols]; out: float32[rows]; all C-contiguous. Parallel over blocks of
    rows (numba.set_num_threads applies) unless W is under SERIAL_BYTES. Uses the
    faster strategy for the format on this CPU (`uses_q8`): int8-quantized x
    (NMSE ~3e-5, as llama.cpp) or exact float activations.
    """
    _check_mv(code, w, x, out)
    _matvec(code, w, x, out, uses_q8(code))


@njit(cache=True)
def matvec_float(code, w, x, out):
    """As `matvec`, always with float activations: exact up to float32 rounding."""
    _check_mv(code, w, x, out)
    _matvec(code, w, x, out, False)


@njit(cache=True)
def matvec_q8(code, w, x, out):
    """As `matvec`, always quantizing x to int8 per 32 elements (llama.cpp's q8_0 trick).

    Quantized formats only. Without VNNI or AVX2 this runs a slow generic fallback.
    """
    _check_mv(code, w, x, out)
    if _is_float(code):
        raise ValueError("matvec_q8 takes quantized weight formats only")
    _matvec(code, w, x, out, True)


@_par
def matmul_fused(code, w, X, OUT):
    """OUT = X @ W.T with the exact float decode kernel per token (no BLAS, no f32 W).

    X: float32[T, cols]; OUT: float32[T, rows]. Each task keeps 16 weight rows hot
    in cache and sweeps all T tokens over them. `matmul` uses it for tiny T.
    """
    _check(code, w, X.shape[1])
    T, cols = X.shape
    rows = w.shape[0]
    if OUT.shape[0] != T or OUT.shape[1] != rows:
        raise ValueError("OUT must be float32[T, rows]")
    XA = np.empty((T, XA_ROWS, cols // 16), np.float32)
    for t in range(T):
        x_sums(X[t], XA[t])
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        r1 = min(rows, r0 + ROWS_PER_TASK)
        for t in range(T):
            dot_rows(code, w, X[t], XA[t], OUT[t], r0, r1)


@njit(parallel=True, cache=True)
def _grouped_tasks(code, w, X, OUT, group_max):
    literally(code)
    rows = w.shape[0]
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        grouped_rows(code, w, X, OUT, r0, min(rows, r0 + ROWS_PER_TASK), group_max)


# One entry per format with a literal type code, so that only the formats a model uses are
# compiled (each is nine unrolled loops; all thirteen take ~90 s the first time).
@njit(cache=True)
def _grouped_q4_0(w, X, OUT, group_max):
    _grouped_tasks(2, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q4_1(w, X, OUT, group_max):
    _grouped_tasks(3, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q5_0(w, X, OUT, group_max):
    _grouped_tasks(6, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q5_1(w, X, OUT, group_max):
    _grouped_tasks(7, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_0(w, X, OUT, group_max):
    _grouped_tasks(8, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q2_k(w, X, OUT, group_max):
    _grouped_tasks(10, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q3_k(w, X, OUT, group_max):
    _grouped_tasks(11, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q4_k(w, X, OUT, group_max):
    _grouped_tasks(12, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q5_k(w, X, OUT, group_max):
    _grouped_tasks(13, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q6_k(w, X, OUT, group_max):
    _grouped_tasks(14, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_f32(w, X, OUT, group_max):
    _grouped_tasks(0, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_f16(w, X, OUT, group_max):
    _grouped_tasks(1, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_bf16(w, X, OUT, group_max):
    _grouped_tasks(30, w, X, OUT, group_max)


@njit(parallel=True, cache=True)
def _grouped_q8_tasks(code, w, X, OUT, group_max):
    literally(code)
    XQ, XA = quantize_rows(X)
    rows = w.shape[0]
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        grouped_q8_rows(code, w, XQ, XA, OUT, r0, min(rows, r0 + ROWS_PER_TASK), group_max)


@njit(cache=True)
def _grouped_q8_q4_0(w, X, OUT, group_max):
    _grouped_q8_tasks(2, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q4_1(w, X, OUT, group_max):
    _grouped_q8_tasks(3, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q5_0(w, X, OUT, group_max):
    _grouped_q8_tasks(6, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q5_1(w, X, OUT, group_max):
    _grouped_q8_tasks(7, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q8_0(w, X, OUT, group_max):
    _grouped_q8_tasks(8, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q2_k(w, X, OUT, group_max):
    _grouped_q8_tasks(10, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q3_k(w, X, OUT, group_max):
    _grouped_q8_tasks(11, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q4_k(w, X, OUT, group_max):
    _grouped_q8_tasks(12, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q5_k(w, X, OUT, group_max):
    _grouped_q8_tasks(13, w, X, OUT, group_max)


@njit(cache=True)
def _grouped_q8_q6_k(w, X, OUT, group_max):
    _grouped_q8_tasks(14, w, X, OUT, group_max)


_GROUPED_Q8 = {
    F.Q4_0: _grouped_q8_q4_0, F.Q4_1: _grouped_q8_q4_1, F.Q5_0: _grouped_q8_q5_0, F.Q5_1: _grouped_q8_q5_1,
    F.Q8_0: _grouped_q8_q8_0, F.Q2_K: _grouped_q8_q2_k, F.Q3_K: _grouped_q8_q3_k, F.Q4_K: _grouped_q8_q4_k,
    F.Q5_K: _grouped_q8_q5_k, F.Q6_K: _grouped_q8_q6_k,
}

_GROUPED = {
    F.Q4_0: _grouped_q4_0, F.Q4_1: _grouped_q4_1, F.Q5_0: _grouped_q5_0, F.Q5_1: _grouped_q5_1,
    F.Q8_0: _grouped_q8_0, F.Q2_K: _grouped_q2_k, F.Q3_K: _grouped_q3_k, F.Q4_K: _grouped_q4_k,
    F.Q5_K: _grouped_q5_k, F.Q6_K: _grouped_q6_k, F.F32: _grouped_f32, F.F16: _grouped_f16,
    F.BF16: _grouped_bf16,
}


def grouped_kernel(code: int, w: np.ndarray, cols: int, group_max: int = GROUP_MAX, *,
                   int8: bool = False) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """The `matmul_grouped` kernel for weight `w` (format `code`, `cols` columns), checked and
    resolved once because a plan calls it every pass: f(w, X, OUT), shapes as `matmul_grouped`.

    int8: quantize each row of X to int8 per 32 (`quantize_q8`) and take integer dots, for the
    quantized formats; float weights stay on the float kernel."""
    code = int(code)
    if not 1 <= group_max <= GROUP_MAX:
        raise ValueError(f"group_max must be between 1 and {GROUP_MAX}")
    _check(code, w, cols)
    if int8 and has_grouped_q8(code):
        fq = _GROUPED_Q8[code]
        return lambda w, X, OUT: fq(w, X, OUT, group_max)
    fn = _GROUPED.get(code) if has_grouped(code, cols) else None
    if fn is None:
        # the per-token fused kernel: invariant too, only without the shared dequantization
        return lambda w, X, OUT: matmul_fused(code, w, X, OUT)
    return lambda w, X, OUT: fn(w, X, OUT, group_max)


def matmul_grouped(code: int, w: np.ndarray, X: np.ndarray, OUT: np.ndarray, group_max: int = GROUP_MAX, *,
                   int8: bool = False) -> None:
    """OUT = X @ W.T for a few tokens, each token's row bit-identical for any T.

    X: float32[T, cols]; OUT: float32[T, rows]. Each task takes 16 weight rows and walks
    them once per group of up to `group_max` (1..8) tokens, dequantizing each 32-weight run
    once for the whole group (`_grouped.py`). A token gets the same bits alone, in a batch of
    16, or as one of a speculative draft's rows, which is what batch-invariant serving and
    speculative decoding rest on. Formats `has_grouped` lacks take the per-token fused
    kernel, which is invariant too, only slower. int8: as `grouped_kernel`.
    """
    T, cols = X.shape
    if OUT.shape != (T, w.shape[0]):
        raise ValueError("OUT must be float32[T, rows]")
    grouped_kernel(code, w, cols, group_max, int8=int8)(w, X, OUT)


@njit(cache=True, nogil=True)
def q8_roundtrip(X, OUT):
    """OUT[t] = the int8-activation scheme's x for X[t]: quantized per 32 (`quantize_q8`) and
    scaled back, d * xq, in float32. Prefill multiplies this with BLAS when decode uses int8
    activations, so a token gets the same activations (to float rounding) whichever path
    computes it: a prompt prefilled at once and one fed in small chunks continue alike. Serial,
    like `_dequantize_tile`: a parallel region between sgemm calls makes the thread pools spin."""
    T, cols = X.shape
    xq = np.empty(cols, np.int8)
    xa = np.empty((XA_ROWS, cols // 16), np.float32)
    for t in range(T):
        quantize_q8(X[t], xq, xa)
        for i in range(cols):
            OUT[t, i] = xa[XD, i // 32] * np.float32(xq[i])


@_par
def matmul_q8(code, w, X, OUT):
    """OUT = X @ W.T by prefill strategy (b): X quantized to int8 blocks of 32, integer dots.

    X: float32[T, cols]; OUT: float32[T, rows]; quantized formats only. Each task keeps
    16 weight rows hot in cache and sweeps all T tokens over them. Measured slower than
    `matmul`'s dequantized tiles + BLAS at T=256; it is `matmul`'s kernel below SMALL_T (the
    cpu plan decodes with the grouped int8 kernel, `matmul_grouped(int8=True)`, instead).
    """
    _check(code, w, X.shape[1])
    if _is_float(code):
        raise ValueError("matmul_q8 takes quantized weight formats only")
    T, cols = X.shape
    rows = w.shape[0]
    if OUT.shape[0] != T or OUT.shape[1] != rows:
        raise ValueError("OUT must be float32[T, rows]")
    XQ, XA = quantize_rows(X)
    for c in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        r0 = c * ROWS_PER_TASK
        r1 = min(rows, r0 + ROWS_PER_TASK)
        for t in range(T):
            qdot_rows(code, w, XQ[t], XA[t], OUT[t], r0, r1)


@_par
def dequantize_range(code, w, r0, r1, out):
    """out[i] = dequantized row r0+i of w, for r0 <= r0+i < r1; out float32[>= r1-r0, cols]."""
    cols = out.shape[1]
    _check(code, w, cols)
    if r1 - r0 > out.shape[0] or r0 < 0 or r1 > w.shape[0]:
        raise ValueError("row range out of bounds")
    for i in prange(r1 - r0):
        deq_row(code, w[r0 + i], out[i])


@njit(fastmath=True, cache=True, nogil=True)
def _dequantize_tile(code, w, r0, r1, out):
    # Serial on purpose: a 128-row tile takes ~10-30 us, and a Numba parallel region
    # between two sgemm calls makes the OpenMP and OpenBLAS thread pools spin against
    # each other on the same cores.
    for i in range(r1 - r0):
        deq_row(code, w[r0 + i], out[i])


@njit(cache=True)
def check_row_ids(row_ids, n, rows):
    """Raise IndexError unless row_ids[:n] are all rows of a weight of `rows` rows (token ids
    of an embedding lookup: a bad one would read past the weight)."""
    for i in range(n):
        if row_ids[i] < 0 or row_ids[i] >= rows:
            raise IndexError("row id out of range")


@_par
def dequantize_rows(code, w, row_ids, out):
    """out[i] = dequantized w[row_ids[i]] (embedding lookup); out float32[len(row_ids), cols]."""
    cols = out.shape[1]
    _check(code, w, cols)
    n = row_ids.shape[0]
    if out.shape[0] != n:
        raise ValueError("out must have one row per id")
    check_row_ids(row_ids, n, w.shape[0])
    for i in prange(n):
        deq_row(code, w[row_ids[i]], out[i])


def matmul(code: int, w: np.ndarray, X: np.ndarray, OUT: np.ndarray, *, tile_rows: int | None = None,
           pool: Executor | None = None, workers: int = 1, interleaved: bool = False) -> None:
    """OUT = X @ W.T for prefill: X float32[T, cols], OUT float32[T, rows] (C-contiguous).

    Strategy (a), the measured winner at T=256 (3-6x over the int8 kernels): dequantize
    `tile_rows` rows of W at a time into an f32 buffer (serially) and hand each tile to
    BLAS sgemm, which writes OUT[:, r0:r1] in place; W is never dequantized whole. F32
    weights go to sgemm directly. For T <= SMALL_T the decode kernels run per token
    instead (`matmul_q8` where `uses_q8(code)`, else `matmul_fused`).

    With a `pool` and `workers` > 1 the tiles are split into that many contiguous runs, each
    dequantized and multiplied on a pool thread (both steps release the GIL) with its own tile
    buffer: the cores share the work through one pool while BLAS itself stays on one thread
    per call, so no second thread pool spins against this one (see `CpuPlan.__call__`).

    interleaved: `w` is in the eight-row layout of `interleaved.py` (`interleaved.pack`); tiles
    are rebuilt row by row into the same floats, and few tokens take the interleaved kernel.
    """
    code = int(code)
    T, cols = X.shape
    rows = w.shape[0] * (ROWS if interleaved else 1)
    if OUT.shape != (T, rows):
        raise ValueError("OUT must be float32[T, rows]")
    if interleaved:
        if T <= SMALL_T:
            interleaved_kernel(code, w, cols)(X, OUT)
            return
        interleaved_kernel(code, w, cols)  # validates the geometry
    elif T <= SMALL_T:
        if uses_q8(code):
            matmul_q8(code, w, X, OUT)
        else:
            matmul_fused(code, w, X, OUT)
        return
    else:
        _check(code, w, cols)
    if code == F.F32:
        np.matmul(X, w.view(np.float32).T, out=OUT)
        return
    # interleaved tiles start on a row group
    align = ROWS if interleaved else 1
    if tile_rows is None:
        tile_rows = max(64, min(TILE_ROWS, TILE_BYTES // (4 * max(cols, 1))))
    tile_rows = max(align, min(tile_rows, rows) // align * align)
    starts = list(range(0, rows, tile_rows))
    if pool is None or workers <= 1 or len(starts) < 2:
        _tiles(code, w, X, OUT, starts, tile_rows, interleaved)
        return
    # smaller tiles when there are fewer tiles than workers, so every worker gets some
    if len(starts) < 2 * workers:
        tile_rows = -(-max(16, -(-rows // (2 * workers))) // align) * align
        starts = list(range(0, rows, tile_rows))
    share = -(-len(starts) // workers)
    jobs = [pool.submit(_tiles, code, w, X, OUT, starts[i:i + share], tile_rows, interleaved)
            for i in range(0, len(starts), share)]
    for job in jobs:
        job.result()


def _tiles(code: int, w: np.ndarray, X: np.ndarray, OUT: np.ndarray, starts: list[int], tile_rows: int,
           interleaved: bool = False) -> None:
    rows, cols = OUT.shape[1], X.shape[1]
    buf = np.empty((tile_rows, cols), np.float32)
    for r0 in starts:
        r1 = min(rows, r0 + tile_rows)
        n = r1 - r0
        if interleaved:
            dequantize_interleaved_tile(code, w, r0, r1, buf)
        else:
            _dequantize_tile(code, w, r0, r1, buf)
        # sgemm writes the strided column block OUT[:, r0:r1] directly (ldc = rows)
        np.matmul(X, buf[:n].T, out=OUT[:, r0:r1])
