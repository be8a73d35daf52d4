"""Decode passes as compiled programs: stretches of the plan's steps run in one Numba call.

Why: a decode token of smollm2:135m is ~480 steps of a few microseconds of work each, and from
Python each step costs 3-5 us on top (slicing, typing its arguments, dispatch): measured ~2 ms
of a 6.5 ms token. The plan encodes each step it can as one row of integers and one of floats;
a pass whose sequences all have few rows runs each stretch of encoded steps with a single call
of `_run`, which calls the kernels the Python steps call, with the same arguments, in the same
order, so a token gets the same bits on either path (tests compare them). Steps with no encoding
(inputs, exports, mixtures of experts, vq8 KV pages, attention on f16 pages by the scalar kernel)
stay Python steps between stretches.

`_run` is compiled once per set of matmul kernels a model uses (`kernels.formats_key`), and
Numba caches it on disk like the kernels. Calls go straight to the compiled entry point: the
arguments' types are fixed when the program is built, so no per-call typing is needed.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Any

import numpy as np
from llamay_backends.cpu import kernels, ops
from numba import carray, literally, njit, typeof, types
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

from llamay_core.graph import ops as G

# An instruction is a row of integers (columns below) and a row of N_FLOATS floats. OP is the
# opcode; SEL 1 when the op runs on the selected logit rows; A, B the buffers it reads, OUT the one
# it writes (ids in `Program.bufs`); W a weight, V a vector (norm weight, bias); P0..P7 and the
# floats per op:
#   MATMUL     P0 kind, P1 format, P2..P5 the interleaved tile's offsets (`kernels.DecodeCall`);
#              W2/OUT2/V2 and W3/OUT3/V3: the second and third weight of a MULTI (`_fuse`)
#   RMS_NORM   P0 has a weight, P1 group; floats eps, weight offset
#   ROPE       P0 angle slot, P1 heads, P2 head dim, P3 rotated dims, P4 neox; floats mscale, freq scale
#   KV_WRITE   A k, B v, P0 and P1 the layer's K and V pages (ids in `Program.kv`), P2 1 on float16
#              pages (viewed as bytes)
#   ATTENTION  P0, P1 pages, P2 heads, P3 KV heads, P4 key dim, P5 value dim, P6 window, P7 kernel
#              (SCALAR_F32, VEC_F32, VEC_F16: the vector kernel on float16 pages); floats scale, softcap
#   EMBED      P0 format; float scale. SCALE, SOFTCAP: float factor, cap. COLUMNS: P0 start, P1 width
OP, SEL, A, B, OUT, W, V, P0, P1, P2, P3, P4, P5, P6, P7, W2, OUT2, V2, W3, OUT3, V3 = range(21)
N_INTS, N_FLOATS = 21, 2
# opcodes
EMBED, RMS_NORM, MATMUL, ADD, MUL, SCALE, ROPE, KV_WRITE, ATTENTION, SILU_MUL, GELU_MUL, SOFTCAP, SELECT, \
    COLUMNS = range(1, 15)
# attention kernels (P7): `ops._attention_scalar` on float32 pages, `ops._attention_vec` on either
SCALAR_F32, VEC_F32, VEC_F16 = 0, 1, 2

SERIAL_ROWS = ops.SERIAL_ROWS
# "0": run every stretch with `_run` (one parallel loop per matmul), never as a team (`team.py`)
TEAM_ENV = "LLAMAY_CPU_TEAM"
# parallel loops (matmuls, attention) a run of instructions needs for a team to run it
MIN_TEAM_LOOPS = 4


class ArrayTable:
    """Arrays of one dtype handed to `_run` as rows (address, shape) of an int64 table: Numba's
    typed lists would do, but building them compiles list code on every start (~2 s measured),
    where this is a NumPy array. The table keeps its arrays alive; `_run` views them in place."""

    def __init__(self, dtype: Any, ndim: int) -> None:
        self.dtype, self.ndim = np.dtype(dtype), ndim
        self.arrays: list[np.ndarray] = []
        self._ids: dict[int, int] = {}

    def add(self, array: np.ndarray) -> int:
        if array.dtype != self.dtype or array.ndim != self.ndim or not array.flags.c_contiguous:
            raise ValueError(f"expected a C-contiguous {self.dtype}[{self.ndim}d] array")
        if id(array) not in self._ids:
            self._ids[id(array)] = len(self.arrays)
            self.arrays.append(array)
        return self._ids[id(array)]

    def __len__(self) -> int:
        return len(self.arrays)

    def table(self) -> np.ndarray:
        out = np.zeros((max(1, len(self.arrays)), 4), np.int64)
        for i, a in enumerate(self.arrays):
            out[i, 0] = a.ctypes.data
            out[i, 1:1 + a.ndim] = a.shape
        return out


@intrinsic
def _address(typingctx, addr):
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return types.voidptr(types.int64), codegen


@njit(inline="always")
def _f32_2d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1], table[k, 2]), np.float32)


@njit(inline="always")
def _f32_1d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1],), np.float32)


@njit(inline="always")
def _f32_3d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1], table[k, 2], table[k, 3]), np.float32)


@njit(inline="always")
def _u8_3d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1], table[k, 2], table[k, 3]), np.uint8)


@njit(inline="always")
def _u8_2d(table, k):
    return kernels.read_only(carray(_address(table[k, 0]), (table[k, 1], table[k, 2]), np.uint8))


@njit(inline="always")
def _f64_1d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1],), np.float64)


@njit(inline="always")
def _f64_2d(table, k):
    return carray(_address(table[k, 0]), (table[k, 1], table[k, 2]), np.float64)


@njit(cache=True)
def _aim_row(table, k, out):
    """Point row `k` of a table at the 2-D float32 array `out` (its address and shape)."""
    table[k, 0] = out.ctypes.data
    table[k, 1] = out.shape[0]
    table[k, 2] = out.shape[1]


@njit(cache=True)
def _put_row(table, k, row):
    table[k, :] = row


@njit(cache=True)
def _run(formats, ints, floats, bufs, weights, vecs, freqs, angles, kv, tokens, positions, seq_index, tables,
         pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial):
    """Run instructions `ints`/`floats` for a pass of `n_tok` tokens, `n_rows` of them selected.

    Compiled per model's matmul kernels (`formats`), so it holds only the loop and the matmuls:
    every other op is `_step`, compiled once for all models."""
    literally(formats)
    for i in range(ints.shape[0]):
        op = ints[i, OP]
        n = n_rows if ints[i, SEL] != 0 else n_tok
        few = n <= SERIAL_ROWS
        if op == MATMUL:
            x = _f32_2d(bufs, ints[i, A])[:n]
            out = _f32_2d(bufs, ints[i, OUT])[:n]
            if ints[i, W2] >= 0:  # two or three weights in one parallel loop (`_fuse`)
                out2 = _f32_2d(bufs, ints[i, OUT2])[:n]
                out3 = _f32_2d(bufs, ints[i, OUT3])[:n] if ints[i, OUT3] >= 0 else out
                kernels.decode_matmul_multi(formats, ints[i, P1], _u8_2d(weights, ints[i, W]),
                                            _u8_2d(weights, ints[i, W2]), _u8_2d(weights, ints[i, W3]), x, out,
                                            out2, out3, ints[i, P2], ints[i, P3], ints[i, P4], ints[i, P5])
            else:
                kernels.decode_matmul(formats, ints[i, P0], ints[i, P1], _u8_2d(weights, ints[i, W]), x, out,
                                      ints[i, P2], ints[i, P3], ints[i, P4], ints[i, P5])
            _biases(ints, i, n, few, bufs, vecs)
        else:
            _step(op, ints, floats, i, n, few, bufs, weights, vecs, freqs, angles, kv, tokens, positions, seq_index,
                  tables, pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial)


@njit(cache=True)
def _biases(ints, i, n, few, bufs, vecs):
    """Each output's bias, where the matmul instruction i names one."""
    if few:
        bias_rows(ints, i, 0, n, bufs, vecs)
        return
    for k in range(3):
        o, v = (OUT, V) if k == 0 else (OUT2, V2) if k == 1 else (OUT3, V3)
        if ints[i, v] >= 0:
            ops._add_bias_par(_f32_2d(bufs, ints[i, o])[:n], _f32_1d(vecs, ints[i, v]))


@njit(cache=True)
def bias_rows(ints, i, t0, t1, bufs, vecs):
    """Rows t0..t1-1 of each output of matmul instruction i plus its bias, where it names one."""
    for k in range(3):
        o, v = (OUT, V) if k == 0 else (OUT2, V2) if k == 1 else (OUT3, V3)
        if ints[i, v] >= 0:
            ops._add_bias_rows(_f32_2d(bufs, ints[i, o]), _f32_1d(vecs, ints[i, v]), t0, t1)


@njit(cache=True)
def _step(op, ints, floats, i, n, few, bufs, weights, vecs, freqs, angles, kv, tokens, positions, seq_index, tables,
          pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial):
    """Instruction i, any op but a matmul, on n rows."""
    if op == ROPE:
        slot = ints[i, P0]
        if angle_pass[slot] != serial:  # once per pass for every rope with these frequencies
            cos = _f64_2d(angles, 2 * slot)[:n_tok]
            sin = _f64_2d(angles, 2 * slot + 1)[:n_tok]
            if n_tok <= SERIAL_ROWS:
                ops._rope_angle_rows(positions, _f64_1d(freqs, slot), floats[i, 1], cos, sin, 0, n_tok)
            else:
                ops._rope_angle_par(positions, _f64_1d(freqs, slot), floats[i, 1], cos, sin)
            angle_pass[slot] = serial
    if op == EMBED:
        kernels.check_row_ids(tokens, n, _u8_2d(weights, ints[i, W]).shape[0])
    if op == ATTENTION:
        q = _f32_2d(bufs, ints[i, A])[:n]
        out = _f32_2d(bufs, ints[i, OUT])[:n]
        if ints[i, P7] == VEC_F16:
            ops._attention_vec(q, positions, seq_index, tables, _u8_3d(kv, ints[i, P0]), _u8_3d(kv, ints[i, P1]),
                               ints[i, P2], ints[i, P3], ints[i, P4], ints[i, P5], floats[i, 0], floats[i, 1],
                               ints[i, P6], arange[:n], out)
        elif ints[i, P7] == VEC_F32:
            ops._attention_vec(q, positions, seq_index, tables, _f32_3d(kv, ints[i, P0]), _f32_3d(kv, ints[i, P1]), ints[i, P2],
                               ints[i, P3], ints[i, P4], ints[i, P5], floats[i, 0], floats[i, 1], ints[i, P6],
                               arange[:n], out)
        else:
            ops._attention_scalar(q, positions, seq_index, tables, _f32_3d(kv, ints[i, P0]), _f32_3d(kv, ints[i, P1]), ints[i, P2],
                                  ints[i, P3], ints[i, P4], ints[i, P5], floats[i, 0], floats[i, 1], ints[i, P6],
                                  out)
    elif op == SELECT:
        x = _f32_2d(bufs, ints[i, A])
        out = _f32_2d(bufs, ints[i, OUT])
        select_rows(x, rows, out, 0, n_rows)
    elif few or op == COLUMNS:
        if not local_step(op, ints, floats, i, 0, n, bufs, weights, vecs, angles, kv, tokens, pages, slots):
            raise ValueError("unknown instruction")
    elif op == RMS_NORM:
        x = _f32_2d(bufs, ints[i, A])[:n]
        out = _f32_2d(bufs, ints[i, OUT])[:n]
        ops._rms_norm_par(x, _f32_1d(vecs, ints[i, V]), ints[i, P0] != 0, floats[i, 0], ints[i, P1], floats[i, 1], out)
    elif op == ADD or op == MUL or op == SILU_MUL or op == GELU_MUL:
        a = _f32_2d(bufs, ints[i, A])[:n]
        b = _f32_2d(bufs, ints[i, B])[:n]
        out = _f32_2d(bufs, ints[i, OUT])[:n]
        if op == ADD:
            ops._add_par(a, b, out)
        elif op == MUL:
            ops._mul_par(a, b, out)
        elif op == SILU_MUL:
            ops._silu_mul_par(a, b, out)
        else:
            ops._gelu_mul_par(a, b, out)
    elif op == ROPE:
        slot = ints[i, P0]
        x = _f32_2d(bufs, ints[i, A])[:n]
        out = _f32_2d(bufs, ints[i, OUT])[:n]
        ops._rope_par(x, _f64_2d(angles, 2 * slot)[:n_tok], _f64_2d(angles, 2 * slot + 1)[:n_tok], ints[i, P1],
                      ints[i, P2], ints[i, P3], ints[i, P4] != 0, out)
        _rope_mscale(ints, floats, i, out, 0, n)
    elif op == KV_WRITE:
        k = _f32_2d(bufs, ints[i, A])[:n]
        v = _f32_2d(bufs, ints[i, B])[:n]
        if ints[i, P2] != 0:
            ops._kv_write_par(k, v, pages, slots, _u8_3d(kv, ints[i, P0]), _u8_3d(kv, ints[i, P1]))
        else:
            ops._kv_write_par(k, v, pages, slots, _f32_3d(kv, ints[i, P0]), _f32_3d(kv, ints[i, P1]))
    elif op == EMBED:
        out = _f32_2d(bufs, ints[i, OUT])[:n]
        kernels.dequantize_rows(ints[i, P0], _u8_2d(weights, ints[i, W]), tokens, out)
        factor = np.float32(floats[i, 0])
        if factor != np.float32(1.0):
            ops._scale_par(out, factor, out)
    elif op == SCALE:
        ops._scale_par(_f32_2d(bufs, ints[i, A])[:n], np.float32(floats[i, 0]), _f32_2d(bufs, ints[i, OUT])[:n])
    elif op == SOFTCAP:
        ops._softcap_par(_f32_2d(bufs, ints[i, A])[:n], floats[i, 0], _f32_2d(bufs, ints[i, OUT])[:n])
    else:
        raise ValueError("unknown instruction")


@njit(cache=True)
def local_step(op, ints, floats, i, t0, t1, bufs, weights, vecs, angles, kv, tokens, pages, slots):
    """Instruction i on rows t0..t1-1 on the calling thread, for an op whose row t reads row t of
    its inputs only (its rope angles computed; its token ids checked): True, or False for any
    other op. The same row kernels as the parallel drivers, so a row's bits are the same."""
    if op == RMS_NORM:
        ops._rms_norm_rows(_f32_2d(bufs, ints[i, A]), _f32_1d(vecs, ints[i, V]), ints[i, P0] != 0, floats[i, 0],
                           ints[i, P1], floats[i, 1], _f32_2d(bufs, ints[i, OUT]), t0, t1)
    elif op == ADD or op == MUL or op == SILU_MUL or op == GELU_MUL:
        a = _f32_2d(bufs, ints[i, A])
        b = _f32_2d(bufs, ints[i, B])
        out = _f32_2d(bufs, ints[i, OUT])
        if op == ADD:
            ops._add_rows(a, b, out, t0, t1)
        elif op == MUL:
            ops._mul_rows(a, b, out, t0, t1)
        elif op == SILU_MUL:
            ops._silu_mul_rows(a, b, out, t0, t1)
        else:
            ops._gelu_mul_rows(a, b, out, t0, t1)
    elif op == ROPE:
        slot = ints[i, P0]
        out = _f32_2d(bufs, ints[i, OUT])
        ops._rope_rows(_f32_2d(bufs, ints[i, A]), _f64_2d(angles, 2 * slot), _f64_2d(angles, 2 * slot + 1), ints[i, P1],
                       ints[i, P2], ints[i, P3], ints[i, P4] != 0, out, t0, t1)
        _rope_mscale(ints, floats, i, out, t0, t1)
    elif op == KV_WRITE:
        if ints[i, P2] != 0:
            ops._kv_write_rows(_f32_2d(bufs, ints[i, A]), _f32_2d(bufs, ints[i, B]), pages, slots,
                               _u8_3d(kv, ints[i, P0]), _u8_3d(kv, ints[i, P1]), t0, t1)
        else:
            ops._kv_write_rows(_f32_2d(bufs, ints[i, A]), _f32_2d(bufs, ints[i, B]), pages, slots,
                               _f32_3d(kv, ints[i, P0]), _f32_3d(kv, ints[i, P1]), t0, t1)
    elif op == EMBED:
        out = _f32_2d(bufs, ints[i, OUT])
        w = _u8_2d(weights, ints[i, W])
        for t in range(t0, t1):
            kernels.deq_row(ints[i, P0], w[tokens[t]], out[t])
        factor = np.float32(floats[i, 0])
        if factor != np.float32(1.0):
            ops._scale_rows(out, factor, out, t0, t1)
    elif op == SCALE:
        ops._scale_rows(_f32_2d(bufs, ints[i, A]), np.float32(floats[i, 0]), _f32_2d(bufs, ints[i, OUT]), t0, t1)
    elif op == SOFTCAP:
        ops._softcap_rows(_f32_2d(bufs, ints[i, A]), floats[i, 0], _f32_2d(bufs, ints[i, OUT]), t0, t1)
    elif op == COLUMNS:
        x = _f32_2d(bufs, ints[i, A])
        out = _f32_2d(bufs, ints[i, OUT])
        start, width = ints[i, P0], ints[i, P1]
        for t in range(t0, t1):
            for c in range(width):  # loops: slice assignment costs seconds of compile for its shape errors
                out[t, c] = x[t, start + c]
    else:
        return False
    return True


@njit(cache=True)
def _rope_mscale(ints, floats, i, out, t0, t1):
    mscale = np.float32(floats[i, 0])
    if mscale != np.float32(1.0):
        n_heads, head_dim, n_rot = ints[i, P1], ints[i, P2], ints[i, P3]
        for t in range(t0, t1):
            for h in range(n_heads):
                for j in range(n_rot):
                    out[t, h * head_dim + j] = out[t, h * head_dim + j] * mscale


@njit(cache=True)
def select_rows(x, rows, out, j0, j1):
    """out[j] = x[rows[j]] for j in j0..j1-1."""
    for j in range(j0, j1):
        for c in range(x.shape[1]):
            out[j, c] = x[rows[j], c]


class Program:
    """The plan's steps as instructions (`add` per step, then `finish`), run by `__call__` for a
    pass whose sequences all have few rows."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self._ints: list[np.ndarray] = []
        self._floats: list[np.ndarray] = []
        self._encoded: list[bool] = []
        self._pairs: set[tuple[int, int]] = set()  # the matmuls' (kind, format) pairs, for `_run`'s dispatch
        self.bufs = ArrayTable(np.float32, 2)  # the plan's activation buffers
        self.weights = ArrayTable(np.uint8, 2)
        self.vecs = ArrayTable(np.float32, 1)  # norm weights, biases
        self.freqs = ArrayTable(np.float64, 1)  # rope frequencies, one per angle slot
        self.angles = ArrayTable(np.float64, 2)  # a slot's cos and sin, [max_tokens, n_rot / 2] each
        # K and V pages per layer: float32, or float16 viewed as bytes (Numba has no float16)
        self.kv_f16 = plan.store.spec.dtype == "f16"
        self.kv = ArrayTable(np.uint8 if self.kv_f16 else np.float32, 3)
        self._slots: dict[tuple[bytes, float], int] = {}
        self.segments: list[Any] = []  # (ints, floats) stretches and Python step indices
        self._entry: Any = None
        self._team_entry: Any = None  # `team.run_team`, for the pieces that say so
        self._team_pieces: dict[int, list[Any]] = {}  # a stretch's (ints, floats, as a team) pieces
        self._solo: tuple[np.ndarray, np.ndarray] | None = None  # the pieces where they are one team call
        self._arange = np.arange(plan.max_tokens, dtype=np.int64)
        self._python_bufs: set[int] = set()  # the buffers (by id) a Python step reads or writes
        self.logits_direct = False  # whether `__call__` may write the logits into a caller's array
        self._logits_buf = -1  # the logits buffer's row in `self.bufs`
        self._logits_home: np.ndarray | None = None

    # -- building -----------------------------------------------------------------------------
    def _buf(self, name: str) -> int:
        return self.bufs.add(self.plan.buffers[name])

    def _vec(self, array: np.ndarray) -> int:
        return self.vecs.add(np.ascontiguousarray(array, np.float32))

    def _slot(self, inv_freq: np.ndarray, freq_scale: float) -> int:
        key = (inv_freq.tobytes(), freq_scale)
        if key not in self._slots:
            self._slots[key] = len(self.freqs)
            self.freqs.add(np.ascontiguousarray(inv_freq, np.float64))
            for _ in range(2):
                self.angles.add(np.zeros((self.plan.max_tokens, len(inv_freq)), np.float64))
        return self._slots[key]

    def add(self, node: Any, selected: bool) -> None:
        """Encode the step the plan just built for `node` (`selected`: it runs on the logit rows)."""
        ints = np.full(N_INTS, -1, np.int64)
        floats = np.zeros(N_FLOATS, np.float64)
        ints[SEL] = int(selected)
        encoded = self._encode(node, ints, floats)
        if not encoded:
            buffers = self.plan.buffers
            self._python_bufs.update(id(buffers[name]) for name in (*node.inputs(), *node.outputs())
                                     if name in buffers)
        self._encoded.append(encoded)
        self._ints.append(ints)
        self._floats.append(floats)

    def _encode(self, node: Any, ints: np.ndarray, floats: np.ndarray) -> bool:
        plan = self.plan
        if isinstance(node, G.MatMul):
            call = plan.decode_calls.get(node.out)
            if call is None:
                return False
            self._pairs.add((call.kind, call.code))
            ints[[OP, A, OUT, W, P0, P1, P2, P3, P4, P5]] = (MATMUL, self._buf(node.x), self._buf(node.out),
                                                             self.weights.add(call.weight), call.kind,
                                                             call.code, call.tile, call.q, call.m, call.hb)
            if node.bias:
                ints[V] = self._vec(plan.weights[node.bias].vector)
            return True
        if isinstance(node, G.RmsNorm):
            weight = plan.weights[node.weight].vector if node.weight else np.ones(1, np.float32)
            ints[[OP, A, OUT, V, P0, P1]] = (RMS_NORM, self._buf(node.x), self._buf(node.out), self._vec(weight),
                                             int(node.weight is not None), int(node.group))
            floats[:] = (float(node.eps), float(node.weight_offset))
            return True
        simple = {G.Add: ADD, G.Mul: MUL, G.SiluMul: SILU_MUL, G.GeluMul: GELU_MUL}
        if type(node) in simple:
            a, b = (node.a, node.b) if isinstance(node, (G.Add, G.Mul)) else (node.gate, node.up)
            ints[[OP, A, B, OUT]] = (simple[type(node)], self._buf(a), self._buf(b), self._buf(node.out))
            return True
        if isinstance(node, (G.Rope, G.RopeTable)):
            if node.mode not in ("normal", "neox"):
                return False
            if isinstance(node, G.Rope):
                inv = node.base ** (-np.arange(0, node.n_rot, 2, dtype=np.float64) / node.n_rot)
                slot, mscale = self._slot(inv, float(node.freq_scale)), 1.0
                floats[:] = (mscale, float(node.freq_scale))
            else:
                slot = self._slot(np.array(node.freqs, np.float64), 1.0)
                floats[:] = (float(node.mscale), 1.0)
            ints[[OP, A, OUT, P0, P1, P2, P3, P4]] = (ROPE, self._buf(node.x), self._buf(node.out), slot,
                                                      node.n_heads, node.head_dim, node.n_rot,
                                                      int(node.mode == "neox"))
            return True
        if isinstance(node, (G.KvWrite, G.Attention)):
            # the scalar attention kernel reads float32 pages only (the Python steps gather
            # float16 ones as float32)
            vec = node.key_dim % 32 == 0 and node.value_dim % 64 == 0 if isinstance(node, G.Attention) else True
            pages = plan.kv_pages(node.layer)
            if pages is None or self.kv_f16 and not vec:
                return False
            k_id, v_id = self.kv.add(pages[0]), self.kv.add(pages[1])
            if isinstance(node, G.KvWrite):
                ints[[OP, A, B, P0, P1, P2]] = (KV_WRITE, self._buf(node.k), self._buf(node.v), k_id, v_id,
                                                int(self.kv_f16))
                return True
            kernel = (VEC_F16 if self.kv_f16 else VEC_F32) if vec else SCALAR_F32
            ints[[OP, A, OUT, P0, P1, P2, P3, P4, P5, P6, P7]] = (
                ATTENTION, self._buf(node.q), self._buf(node.out), k_id, v_id, node.n_heads, node.n_kv_heads,
                node.key_dim, node.value_dim, int(node.window), kernel)
            floats[:] = (float(node.scale), float(node.softcap))
            return True
        if isinstance(node, G.Embed):
            wt = plan.weights[node.weight]
            ints[[OP, OUT, W, P0]] = (EMBED, self._buf(node.out), self.weights.add(wt.rows), wt.code)
            floats[0] = float(np.float32(node.scale))
            return True
        if isinstance(node, G.Scale):
            ints[[OP, A, OUT]] = (SCALE, self._buf(node.x), self._buf(node.out))
            floats[0] = float(np.float32(node.factor))
            return True
        if isinstance(node, G.Softcap):
            ints[[OP, A, OUT]] = (SOFTCAP, self._buf(node.x), self._buf(node.out))
            floats[0] = float(node.cap)
            return True
        if isinstance(node, G.SelectRows):
            ints[[OP, A, OUT]] = (SELECT, self._buf(node.x), self._buf(node.out))
            return True
        if isinstance(node, G.Columns):
            ints[[OP, A, OUT, P0, P1]] = (COLUMNS, self._buf(node.x), self._buf(node.out), node.start, node.width)
            return True
        return False

    def finish(self) -> None:
        """Cut the instructions into stretches between Python steps and compile `_run` for them."""
        start = None
        for i, encoded in enumerate(self._encoded + [False]):
            if encoded and start is None:
                start = i
            if not encoded:
                if start is not None:
                    ints, floats = self._fuse(self._ints[start:i], self._floats[start:i])
                    self.segments.append((np.ascontiguousarray(ints), np.ascontiguousarray(floats)))
                    start = None
                if i < len(self._encoded):
                    self.segments.append(i)
        self._find_logits()
        self.formats = kernels.formats_key(self._pairs)
        self.angle_pass = np.full(max(1, len(self.freqs)), -1, np.int64)
        self.tables = tuple(t.table() for t in (self.bufs, self.weights, self.vecs, self.freqs, self.angles, self.kv))
        if self.logits_direct:  # the row naming the plan's own buffer, put back after each pass
            self._logits_home = self.tables[0][self._logits_buf].copy()
        if any(not isinstance(s, int) for s in self.segments):
            self._compile()
            self._compile_team()

    def _find_logits(self) -> None:
        # The logits may go straight into the array a pass returns (no copy of its rows after
        # the pass: the copy read ~600 KB to 1 MB from other cores' caches, 80-130 us a token)
        # where only compiled instructions touch the logits buffer and each of those covers the
        # logit rows only, so an array of that many rows stands in for it
        logits = self.plan.buffers.get(self.plan.graph.output)
        k = self.bufs._ids.get(id(logits), -1) if logits is not None else -1
        if k < 0 or id(logits) in self._python_bufs:
            return
        for row in self._ints:
            if k in row[[A, B, OUT, OUT2, OUT3]] and not (row[SEL] or row[OP] == SELECT and row[OUT] == k):
                return
        self.logits_direct, self._logits_buf = True, k

    def _fuse(self, ints: list[np.ndarray], floats: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Merge interleaved matmuls of one format reading the same value (q, k, v; gate, up) into
        one instruction of up to three weights, where no instruction in between touches what the
        later one writes or rewrites what it reads. Each output gets the same bits either way."""
        kept_i: list[np.ndarray] = []
        kept_f: list[np.ndarray] = []
        for row, frow in zip(ints, floats):
            if self._merge(row, kept_i):
                continue
            kept_i.append(row.copy())
            kept_f.append(frow)
        return kept_i, kept_f

    def _merge(self, row: np.ndarray, kept: list[np.ndarray]) -> bool:
        if row[OP] != MATMUL or row[SEL] or row[P0] != kernels.INTERLEAVED or row[OUT] == row[A]:
            return False
        for earlier in reversed(kept):
            if (earlier[OP] == MATMUL and not earlier[SEL] and earlier[P0] in (kernels.INTERLEAVED, kernels.MULTI)
                    and earlier[A] == row[A] and earlier[P1] == row[P1] and earlier[OUT3] < 0
                    and row[OUT] not in (earlier[OUT], earlier[OUT2])):
                slot = (W2, OUT2, V2) if earlier[W2] < 0 else (W3, OUT3, V3)
                earlier[list(slot)] = (row[W], row[OUT], row[V])
                if earlier[P0] == kernels.INTERLEAVED:
                    earlier[P0] = kernels.MULTI
                    self._pairs.add((kernels.MULTI, int(row[P1])))
                    # the absent third weight: no row groups, so no task
                    earlier[W3] = self.weights.add(kernels.empty_weight())
                return True
            reads = {earlier[A], earlier[B]} if earlier[OP] != MATMUL else {earlier[A]}
            writes = {earlier[OUT], earlier[OUT2], earlier[OUT3]}
            if row[OUT] in reads | writes or row[A] in writes:
                return False
        return False

    def _compile(self) -> None:
        # one call with no tokens compiles (or loads from Numba's cache) `_run` for this model's
        # kernels, the signature given with the literal: a plain call would first type `_run`
        # without it only to be told to retry with it. Later calls go straight to the entry point.
        # `_run` is not itself parallel, so loading it from the cache does not start Numba's
        # threading layer, which the kernels' parallel loops inside it call into (a crash, when
        # no parallel function ran before in the process)
        _launch_threads()
        ints, floats = next(s for s in self.segments if not isinstance(s, int))
        empty = np.zeros(0, np.int64)
        args = (ints, floats, *self.tables, empty, empty, empty, np.zeros((1, 1), np.int64), empty, empty, empty,
                self._arange, 0, 0, self.angle_pass, -1)
        sig = (types.literal(self.formats),) + tuple(typeof(a) for a in args)
        _run.compile(sig)
        self._entry = _run.overloads[sig].entry_point
        self._entry(self.formats, *args)

    def _compile_team(self) -> None:
        # the team runner (`team.py`) where it can run at all: each stretch cut into runs of
        # instructions it runs and runs of those it does not (left to `_run`)
        from llamay_backends.cpu import sync, team

        cores = team.team_cores()
        if os.environ.get(TEAM_ENV, "1") == "0" or team.team_threads(cores) == 0:
            return
        for k, segment in enumerate(self.segments):
            if isinstance(segment, int):
                continue
            ints, floats = segment
            ready = team.team_ready(ints)
            cuts = [0] + [i for i in range(1, len(ints)) if ready[i] != ready[i - 1]] + [len(ints)]
            # a run of few parallel loops gains nothing from a team (one region either way) and
            # would cost its compile: graphs of one op, as conformance's op cases
            self._team_pieces[k] = [(np.ascontiguousarray(ints[a:b]), np.ascontiguousarray(floats[a:b]),
                                     bool(ready[a]) and team.parallel_loops(ints[a:b]) >= MIN_TEAM_LOOPS)
                                    for a, b in zip(cuts, cuts[1:])]
        teamed = [piece for pieces in self._team_pieces.values() for piece in pieces if piece[2]]
        if len(self.segments) == 1 and len(self._team_pieces.get(0, ())) == 1 and teamed:
            self._solo = teamed[0][:2]
        if not teamed:
            self._team_pieces = {}
            return
        self._team_state = sync.new_state()
        self._team_scratch = team.attention_scratch(np.concatenate([piece[0] for piece in teamed]))
        ints, floats, _ = teamed[0]
        empty = np.zeros(0, np.int64)
        args = (ints, floats, *self.tables, empty, empty, empty, np.zeros((1, 1), np.int64), empty, empty, empty,
                self._arange, 0, 0, self.angle_pass, -1, self._team_state, *self._team_scratch, 1)
        sig = (types.literal(self.formats),) + tuple(typeof(a) for a in args)
        team.run_team.compile(sig)
        self._team_entry = team.run_team.overloads[sig].entry_point
        self._team_entry(self.formats, *args)
        # the cores read once, Numba's count each pass
        self._team_threads = partial(team.team_threads, cores, team.thread_count_reader())

    # -- running ------------------------------------------------------------------------------
    def __call__(self, p: Any, logits: np.ndarray | None = None) -> None:
        """Run the pass `p` (a `PassInfo`): stretches compiled, the other steps as Python.
        `logits` (only where `logits_direct`): a float32 array [logit rows, vocabulary] the pass
        writes the logits into, in place of the plan's buffer."""
        if logits is None:
            self._run_pass(p)
            return
        # compiled, not `logits.ctypes.data`: each token runs this with cold caches (its weights
        # have just streamed through them), where the ctypes helper costs ~20 us, this ~4 us
        bufs = self.tables[0]
        _aim_row(bufs, self._logits_buf, logits)
        try:
            self._run_pass(p)
        finally:  # the caller's array may go: no later pass may find it in the table
            _put_row(bufs, self._logits_buf, self._logits_home)

    def _run_pass(self, p: Any) -> None:
        n = p.n
        p.n_rows = n_rows = len(p.rows)
        if p.compiled_fields is not None and len(self.kv):
            per_pass = p.compiled_fields  # a decode token's, built as the entry point takes them
        else:
            pages = p.pages if len(self.kv) else np.zeros(n, np.int64)
            # the entry point does not check types: each array as compiled (int64, C-contiguous)
            per_pass = tuple(np.ascontiguousarray(a, np.int64) for a in
                             (p.tokens, p.positions, p.seq_index, p.tables, pages, p.slots, p.rows))
        # a team while the threads it needs are there (a caller may have changed Numba's count)
        threads = self._team_threads() if self._team_entry is not None else 0
        if self._solo is not None and threads > 1:  # a decode token's usual case: one team call
            self._team_entry(self.formats, *self._solo, *self.tables, *per_pass, self._arange, n, n_rows,
                             self.angle_pass, p.serial, self._team_state, *self._team_scratch, threads)
            return
        steps = self.plan.steps
        for k, segment in enumerate(self.segments):
            if isinstance(segment, int):
                steps[segment](p)
                continue
            if threads > 1 and k in self._team_pieces:
                for ints, floats, teamed in self._team_pieces[k]:
                    if teamed:
                        self._team_entry(self.formats, ints, floats, *self.tables, *per_pass, self._arange, n,
                                         n_rows, self.angle_pass, p.serial, self._team_state, *self._team_scratch,
                                         threads)
                    else:
                        self._entry(self.formats, ints, floats, *self.tables, *per_pass, self._arange, n, n_rows,
                                    self.angle_pass, p.serial)
                continue
            ints, floats = segment
            self._entry(self.formats, ints, floats, *self.tables, *per_pass, self._arange, n, n_rows,
                        self.angle_pass, p.serial)
