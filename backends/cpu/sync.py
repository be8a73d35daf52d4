"""A spin barrier and a shared count of tasks taken, for threads that stay inside one Numba
parallel region (`team.py`).

Why: a decode token of a small model is ~150 parallel loops (matmuls, attention) of a few
microseconds each; entering and leaving a Numba `prange` costs ~1.5 us and each loop starts its
memory streams cold. A team that enters once per stretch of the program meets at these barriers
instead (~0.1-0.3 us on two cores).

The state is an int64 array made by `new_state`: its counters (arrivals, the barrier's generation,
tasks taken) a cache line apart, so arriving or taking does not bounce the line the waiting
threads read.
"""
from __future__ import annotations

import os
import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from llamay_backends.cpu.kernels._simd import prefetch

# int64 slots a cache line apart
LINE = 8
ARRIVED, GENERATION, TAKEN = 0, LINE, 2 * LINE
# spins (each a `pause`) before a waiting thread starts yielding its core: enough to cover a
# barrier that both threads reach within microseconds, short of burning an oversubscribed
# core's time slice while the other thread waits for it
SPINS_BEFORE_YIELD = 2048

_POSIX = os.name == "posix"
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def new_state() -> np.ndarray:
    """A barrier's state, for any number of threads, and a count of tasks taken (`take`)."""
    return np.zeros(3 * LINE, np.int64)


def _slot_ptr(context, builder, aryty, ary, index):
    a = context.make_array(aryty)(context, builder, ary)
    return builder.gep(a.data, [index])


@intrinsic
def fetch_add(typingctx, state, index, value):
    """state[index] += value atomically; the value before."""
    def codegen(context, builder, sig, args):
        ptr = _slot_ptr(context, builder, sig.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")
    return types.int64(state, types.intp, types.int64), codegen


@intrinsic
def compare_exchange(typingctx, state, index, expected, value):
    """state[index] = value if it holds `expected`, atomically; whether it did."""
    def codegen(context, builder, sig, args):
        ptr = _slot_ptr(context, builder, sig.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)
    return types.boolean(state, types.intp, types.int64, types.int64), codegen


@intrinsic
def load(typingctx, state, index):
    """state[index], read atomically (acquire)."""
    def codegen(context, builder, sig, args):
        ptr = _slot_ptr(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)
    return types.int64(state, types.intp), codegen


@intrinsic
def store(typingctx, state, index, value):
    """state[index] = value, atomically (release)."""
    def codegen(context, builder, sig, args):
        ptr = _slot_ptr(context, builder, sig.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()
    return types.none(state, types.intp, types.int64), codegen


@intrinsic
def pause(typingctx):
    """The spin-wait hint (x86 `pause`; nothing elsewhere)."""
    def codegen(context, builder, sig, args):
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def yield_core(typingctx):
    """Give the core to another runnable thread (POSIX `sched_yield`, named here rather than
    taken as a ctypes pointer so the functions calling it can be cached)."""
    def codegen(context, builder, sig, args):
        if _POSIX:  # elsewhere the wait stays a spin
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


@njit(cache=True)
def barrier(state, n_threads, flat, start, end):
    """Wait until all `n_threads` threads of the team reach this call; meanwhile hint bytes
    start..end-1 of `flat` (uint8; the weights this thread reads next) into the cache, while the
    memory bus would idle. Everything a thread wrote before the call is seen by every thread
    after it (the counters are sequentially consistent)."""
    generation = load(state, GENERATION)
    if fetch_add(state, ARRIVED, 1) == n_threads - 1:
        store(state, ARRIVED, 0)
        fetch_add(state, GENERATION, 1)
        return
    spins = 0
    at = start
    while load(state, GENERATION) == generation:
        if at < end:
            for k in range(8):  # a few lines between looks at the barrier
                prefetch(flat, at + 64 * k)
            at += 512
        elif spins < SPINS_BEFORE_YIELD:
            pause()
            spins += 1
        else:
            yield_core()


@njit(cache=True)
def first_share(tid, n_threads, n_tasks, own):
    """(first, count, done): the tasks thread `tid` of a team runs first, of tasks 0..n_tasks-1
    that every thread of the team shares. Two threads: tasks 0..own-1 are the first thread's and
    the last `own` the second's, so each starts streaming from its end of the weights at once,
    and the rest go to `next_share`; more threads split the tasks evenly and statically. `done`
    is what `next_share` is given back."""
    if n_threads != 2:
        first = tid * n_tasks // n_threads
        return first, (tid + 1) * n_tasks // n_threads - first, 0
    return (0 if tid == 0 else n_tasks - own), own, own


@njit(cache=True)
def next_share(state, tid, n_threads, n_tasks, own, done, least):
    """(first, count, done): the next tasks thread `tid` runs after those `first_share` or this
    gave it; count 0 when none is left. Two threads take the middle, n_tasks - 2 own tasks, a
    part at a time (`take`, at least `least`): the first thread going on from the front, the
    second from the back, so the one that is ahead takes more. Reset the count (`store(state,
    TAKEN, 0)`) once every thread is past its last call, before the next shared op."""
    if n_threads != 2:
        return 0, 0, done
    count = take(state, n_tasks - 2 * own, least)
    first = done if tid == 0 else n_tasks - done - count
    return first, count, done + count


@njit(cache=True)
def take(state, n_tasks, least):
    """How many of the next tasks of `n_tasks` shared by two threads the caller takes: one
    quarter of those left (at least `least`), 0 when none is left.
    Large first takes keep the shared counter's traffic to a few transfers; the small last ones
    let the thread that is ahead take more. Reset with `store(state, TAKEN, 0)` between uses."""
    while True:
        taken = load(state, TAKEN)
        if taken >= n_tasks:
            return 0
        count = min(n_tasks - taken, max(least, (n_tasks - taken) // 4))
        if compare_exchange(state, TAKEN, taken, taken + count):
            return count
