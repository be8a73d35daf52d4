"""A stretch of a decode program run by a team of threads inside one parallel region.

Why: `program._run` runs each matmul and attention as its own Numba parallel loop: a smollm2:135m
token is ~150 of them, each a few microseconds of work for ~1.5 us of entering and leaving the
loop, Numba's static split leaves the thread on the busier core last at each loop's end, and the
other thread idles through the serial ops between loops. Here each thread of Numba's pool runs
the whole stretch (`_member`): ops whose row t reads only row t (norms, rope, adds) run on each
thread's own rows; matmul and attention tasks are shared from either end of their numbering
(`sync.first_share`, `sync.next_share`: the thread that is ahead takes more); the threads meet at a spin
barrier (`sync.barrier`) only where one reads what another wrote, and a thread that waits
there fetches the start of its share of the next matmul's weights meanwhile.

Bits: every task and row runs the kernel `_run` would run on the same inputs (`run_tasks`,
`attention_task`, the `_rows` kernels), so a token gets the same bits on either path and with any
number of threads (tests/unit/test_cpu_team.py).

The team needs every thread of the region to run at once (a barrier waits for all): it is used
only where Numba's threading layer gives each iteration of `prange(n_threads)` its own thread
(omp, workqueue) and there are no more threads than cores (`team_threads`). A stretch's
instructions a team does not run (matmuls of the grouped and float kernels, attention by the
scalar kernel) are left to `_run` (`team_ready`, `Program._compile_team`), as are runs of fewer
than `program.MIN_TEAM_LOOPS` parallel loops (a graph of one op: nothing to gain, a compile to pay). Anything that could
raise is checked before the region starts: a thread that raised would leave the others waiting.
LLAMAY_CPU_TEAM=0 turns the team off.
"""
from __future__ import annotations

from typing import Callable

import numba
import numpy as np
from llamay_backends.cpu import kernels, ops, sync
from llamay_backends.cpu.program import (A, ATTENTION, EMBED, MATMUL, OP, OUT, OUT2, OUT3, P0, P1, P2, P3, P4, P5, P6,
                                         P7, ROPE, SCALAR_F32, SEL, SELECT, VEC_F16, W, W2, W3, _f32_2d,
                                         _f32_3d, _f64_1d, _f64_2d, _u8_2d, _u8_3d, bias_rows, local_step, select_rows)
from llamay_backends.cpu.kernels._interleaved import chunk_tasks, count_tasks, own_tasks, task_weight
from numba import literally, njit, prange
from numba.np.ufunc import parallel as numba_parallel
from numba.np.ufunc.parallel import _launch_threads

from llamay_core.host_info import usable_cores

# bytes of its next matmul's weights a thread fetches while it waits at a barrier
PREFETCH_AHEAD = 32768
# threading layers whose `prange(n_threads)` runs each iteration on its own thread, all at once
TEAM_LAYERS = ("omp", "workqueue")


def team_ready(ints: np.ndarray) -> np.ndarray:
    """Per instruction, whether a team runs it: any op but a matmul of another kind than the
    interleaved ones (one to three weights) or attention by the scalar kernel."""
    ready = np.ones(len(ints), bool)
    for i, row in enumerate(ints):
        if row[OP] == MATMUL and row[P0] not in (kernels.INTERLEAVED, kernels.MULTI):
            ready[i] = False
        if row[OP] == ATTENTION and row[P7] == SCALAR_F32:
            ready[i] = False
    return ready


def parallel_loops(ints: np.ndarray) -> int:
    """The matmuls and attention of some instructions: what a team runs in one region."""
    return int(np.isin(ints[:, OP], (MATMUL, ATTENTION)).sum())


def team_cores() -> int:
    """Cores this process may run a team on, or 0 where a team cannot run at all: a threading
    layer that may run two iterations of a parallel loop on one thread (tbb)."""
    _launch_threads()  # the layer is chosen when the pool starts
    if numba.threading_layer() not in TEAM_LAYERS:
        return 0
    return usable_cores()


def thread_count_reader() -> Callable[[], int]:
    """A function that reads Numba's thread count for the calling thread now, as
    `numba.get_num_threads` does, but straight from the threading layer: that function first
    takes two locks, one a multiprocessing lock, ~30 us a decode token right after the token's
    weights streamed through the caches (smollm2:135m), and a program asks every pass."""
    _launch_threads()  # the layer's counter exists once its pool is up
    read = getattr(numba_parallel, "_get_num_threads", None)  # Numba's own, private: else the public one
    return read if read is not None else numba.get_num_threads


def team_threads(cores: int | None = None, read: Callable[[], int] | None = None) -> int:
    """Threads a team would have now (Numba's count, which a caller may change), or 0 where a
    team cannot run: no team layer, or more threads than cores to run them. `cores`: what
    `team_cores()` said, and `read` a `thread_count_reader()`, where a caller asks every pass."""
    cores = team_cores() if cores is None else cores
    threads = int((read or numba.get_num_threads)())
    return threads if 1 < threads <= cores else 0


def attention_scratch(ints: np.ndarray) -> tuple[int, int]:
    """(heads, heads x value width): the widest attention of a stretch, for its pieces' scratch."""
    heads = width = 1
    for row in ints:
        if row[OP] == ATTENTION:
            heads = max(heads, int(row[P2]))
            width = max(width, int(row[P2] * row[P5]))
    return heads, width


@njit(parallel=True, cache=True)
def run_team(formats, ints, floats, bufs, weights, vecs, freqs, angles, kv, tokens, positions, seq_index, tables,
             pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial, state, heads, width, n_threads):
    """`program._run` for a team of `n_threads` threads, Numba's number now (`team_threads`; not
    asked here: that call would keep this function out of Numba's cache): each runs `_member`
    over all instructions."""
    literally(formats)
    for i in range(ints.shape[0]):  # what would raise inside the region (a thread left waiting)
        if ints[i, OP] == EMBED:
            kernels.check_row_ids(tokens, n_tok, _u8_2d(weights, ints[i, W]).shape[0])
    # every attention's pieces (`ops.attention_plan`: at most MAX_PIECES + 1 a row), shaped per op
    part_m = np.empty(pieces(n_tok) * heads, np.float32)
    part_l = np.empty(pieces(n_tok) * heads, np.float32)
    part_o = np.empty(pieces(n_tok) * width, np.float32)
    fresh = np.zeros(angle_pass.shape[0], np.int64)  # angle slots this call computed
    for tid in prange(n_threads):
        _member(formats, tid, n_threads, ints, floats, bufs, weights, vecs, freqs, angles, kv, tokens, positions,
                seq_index, tables, pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial, state, part_m,
                part_l, part_o, fresh)
    for s in range(fresh.shape[0]):
        if fresh[s] != 0:
            angle_pass[s] = serial


@njit(cache=True)
def _member(formats, tid, n_threads, ints, floats, bufs, weights, vecs, freqs, angles, kv, tokens, positions,
            seq_index, tables, pages, slots, rows, arange, n_tok, n_rows, angle_pass, serial, state, part_m, part_l,
            part_o, fresh):
    literally(formats)
    # Whether to meet depends on the instructions and n only, so every thread meets at the same ones
    # (conservatively: a write counts whether or not this thread had rows).
    written = False  # outputs written since the last barrier
    split = -1  # the last op's outputs are each thread's rows of range(split); -1: by task
    mine = np.zeros(angle_pass.shape[0], np.int64)  # angle slots whose rows this thread computed
    for i in range(ints.shape[0]):
        op = ints[i, OP]
        n = n_rows if ints[i, SEL] != 0 or op == SELECT else n_tok  # SELECT: its output's rows
        t0 = tid * n // n_threads
        t1 = (tid + 1) * n // n_threads
        if op == MATMUL or op == ATTENTION or op == SELECT:
            # reads rows other threads wrote
            if written:
                _meet(formats, ints, i, n, weights, state, tid, n_threads)
            out = _f32_2d(bufs, ints[i, OUT])
            if op == SELECT:
                select_rows(_f32_2d(bufs, ints[i, A]), rows, out, t0, t1)
            elif op == MATMUL:
                _matmul(formats, ints, i, n, bufs, weights, tid, n_threads, state)
                # every task done before any thread reads its rows
                _meet(formats, ints, i + 1, n, weights, state, tid, n_threads)
                if tid == 0:  # no thread takes tasks again before the next barrier
                    sync.store(state, sync.TAKEN, 0)
                bias_rows(ints, i, t0, t1, bufs, vecs)
            else:
                n_heads, width = ints[i, P2], ints[i, P2] * ints[i, P5]
                pm = part_m[:pieces(n) * n_heads].reshape(pieces(n), n_heads)
                pl = part_l[:pieces(n) * n_heads].reshape(pieces(n), n_heads)
                po = part_o[:pieces(n) * width].reshape(pieces(n), width)
                task_start = _attention(ints, floats, i, n, bufs, kv, positions, seq_index, tables, arange, tid,
                                        n_threads, state, pm, pl, po)
                _meet(formats, ints, i + 1, n, weights, state, tid, n_threads)
                if tid == 0:
                    sync.store(state, sync.TAKEN, 0)
                ops.attention_merge(arange, task_start, pm, pl, po, out, t0, t1)
            written = True
            split = n
            continue
        # row t reads row t only: this thread's rows, once what they read is settled
        if split != n and written:
            _meet(formats, ints, i, n, weights, state, tid, n_threads)
        if op == ROPE:
            slot = ints[i, P0]
            if angle_pass[slot] != serial and mine[slot] == 0:
                ops._rope_angle_rows(positions, _f64_1d(freqs, slot), floats[i, 1], _f64_2d(angles, 2 * slot),
                                     _f64_2d(angles, 2 * slot + 1), t0, t1)
                mine[slot] = 1
                fresh[slot] = 1
        local_step(op, ints, floats, i, t0, t1, bufs, weights, vecs, angles, kv, tokens, pages, slots)
        written = True
        split = n


@njit(cache=True)
def _meet(formats, ints, i, n, weights, state, tid, n_threads):
    # the barrier, spent fetching the start of this thread's share of the next matmul's weights
    j = i
    while j < ints.shape[0] and ints[j, OP] != MATMUL:
        j += 1
    if j == ints.shape[0] or n == 0:
        sync.barrier(state, n_threads, np.empty(0, np.uint8), 0, 0)
        return
    w0, w1, w2 = _weights(ints, j, weights)
    n_tasks = count_tasks(w0, w1, w2, n)
    first, _, _ = sync.first_share(tid, n_threads, n_tasks, own_tasks(n_tasks))
    which, g0 = task_weight(first % chunk_tasks(w0, w1, w2), w0, w1, w2)
    wp = w0 if which == 0 else w1 if which == 1 else w2
    flat = wp.reshape(wp.size)
    start = g0 * wp.shape[1]
    sync.barrier(state, n_threads, flat, start, min(flat.shape[0], start + PREFETCH_AHEAD))


@njit(cache=True)
def _weights(ints, i, weights):
    # matmul i's one to three weights: an absent one has no row groups, so no task (`empty_weight`)
    none = kernels.read_only(np.empty((0, 1), np.uint8))
    w2 = _u8_2d(weights, ints[i, W2]) if ints[i, W2] >= 0 else none
    w3 = _u8_2d(weights, ints[i, W3]) if ints[i, W3] >= 0 else none
    return _u8_2d(weights, ints[i, W]), w2, w3


@njit(inline="always")
def pieces(n):
    """Attention pieces n rows can have at most (`ops.attention_plan`)."""
    return n * (ops.MAX_PIECES + 1)


@njit(cache=True)
def _matmul(formats, ints, i, n, bufs, weights, tid, n_threads, state):
    x = _f32_2d(bufs, ints[i, A])[:n]
    out = _f32_2d(bufs, ints[i, OUT])[:n]
    w1, w2, w3 = _weights(ints, i, weights)
    out2 = _f32_2d(bufs, ints[i, OUT2])[:n] if ints[i, OUT2] >= 0 else out
    out3 = _f32_2d(bufs, ints[i, OUT3])[:n] if ints[i, OUT3] >= 0 else out
    kernels.team_matmul(formats, ints[i, P1], w1, w2, w3, x, out, out2, out3, ints[i, P2], ints[i, P3], ints[i, P4],
                        ints[i, P5], tid, n_threads, state)


@njit(cache=True)
def _attention(ints, floats, i, n, bufs, kv, positions, seq_index, tables, arange, tid, n_threads, state, part_m,
               part_l, part_o):
    rows = arange[:n]
    firsts, sizes, task_start = ops.attention_plan(positions, rows, ints[i, P6])
    if ints[i, P7] == VEC_F16:
        _pieces(ints, floats, i, n, bufs, _u8_3d(kv, ints[i, P0]), _u8_3d(kv, ints[i, P1]), positions, seq_index,
                tables, rows, firsts, sizes, task_start, tid, n_threads, state, part_m, part_l, part_o)
    else:
        _pieces(ints, floats, i, n, bufs, _f32_3d(kv, ints[i, P0]), _f32_3d(kv, ints[i, P1]), positions, seq_index,
                tables, rows, firsts, sizes, task_start, tid, n_threads, state, part_m, part_l, part_o)
    return task_start


@njit(cache=True)
def _pieces(ints, floats, i, n, bufs, k_store, v_store, positions, seq_index, tables, rows, firsts, sizes, task_start,
            tid, n_threads, state, part_m, part_l, part_o):
    # pieces shared as a matmul's tasks, none owned: a row's pieces are few and uneven
    q = _f32_2d(bufs, ints[i, A])
    out = _f32_2d(bufs, ints[i, OUT])
    n_tasks = task_start[n]
    first, count, done = sync.first_share(tid, n_threads, n_tasks, 0)
    while True:
        for task in range(first, first + count):
            ops.attention_task(task, q, positions, seq_index, tables, k_store, v_store, ints[i, P2], ints[i, P3],
                               ints[i, P4], ints[i, P5], floats[i, 0], floats[i, 1], rows, firsts, sizes,
                               task_start, part_m, part_l, part_o, out)
        first, count, done = sync.next_share(state, tid, n_threads, n_tasks, 0, done, 1)
        if count == 0:
            return


__all__ = ["run_team", "team_ready", "team_cores", "team_threads", "attention_scratch", "TEAM_LAYERS"]
