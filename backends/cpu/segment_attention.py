"""Prefill attention of a long segment (one sequence's rows) as float32 GEMMs over its K/V.

A segment's queries for one KV head are a [rows x group, key_dim] block and its visible keys one
[n_keys, key_dim] block, so scores and the weighted sum of values are matrix products that BLAS
runs near the core's peak; the Numba tile kernel this replaced summed every score with a
horizontal add and streamed a tile's scores three times (~56 GFLOP/s at 4k keys). The work is cut
into (KV head, query tile) tasks shared out over the plan's threads, each running a one-thread
sgemm (the plan limits BLAS to one thread during prefill); the softmax between the two products
is one Numba pass per row (`block_softmax`) that releases the GIL, so both threads run it.

A row's bits must not depend on how its prompt was cut into passes (a forked context's question
and the same text prefilled at once must generate the same tokens): every product has the same
shape whatever the segment (QUERY_ROWS x group rows on a grid of positions anchored at 0,
zero-padded: a row at the same place in every product; BLOCK keys, on a grid anchored at key 0,
zero-padded), scores sum per block, and blocks add in key order. Keys outside a row's
causal window weigh exactly 0, so the blocks a task computes beyond a row's own add only zeros
to it, and a task skips the blocks that no row of its tile can see.
"""
from __future__ import annotations

import math
from concurrent.futures import Executor

import numpy as np
from numba import njit

from llamay_backends.cpu.kernels._simd import vadd, vexp, vhmax, vhsum, vld, vmax, vmul, vsplat, vst, vsub, vzero

QUERY_ROWS = 64  # query rows per task
# keys per product: the reduction length of every weighted value sum. A task computes only the
# blocks its tile's rows can see, so smaller blocks waste less past a causal tile's last row
# (at 512 every tile of a 512-token prompt paid for all 512 keys); one thread, attention of
# 512 rows at 0-512 (smollm2's shape): 512 keys 9.4 ms, 256 7.6, 128 7.2; at 3.5k-4k: 77.7,
# 82.3, 89.0 (docs/performance.md). Prompts are mostly short.
BLOCK = 128


@njit(fastmath=False, cache=True, nogil=True, error_model="numpy")
def block_softmax(s, qpos, key0, window, scale, cap, block, total):
    """In place, row i of s (scores of keys key0, key0 + 1, ...) becomes its unnormalised softmax
    weights: exp(score - max) on the row's visible keys (key0 + j <= qpos[i], and within `window`
    when > 0), exactly 0 elsewhere; total[i] = the weights' sum, per `block` columns in order.
    Scores are scaled (and soft-capped when cap > 0) first. s's width is a multiple of `block`,
    and `block` one of 16."""
    rows, width = s.shape
    scale32 = np.float32(scale)
    cap32 = np.float32(cap)
    for i in range(rows):
        row = s[i]
        hi = min(width, qpos[i] - key0 + 1)
        lo = 0
        if window > 0:
            lo = max(0, qpos[i] - window + 1 - key0)
        # 16 lanes at a time over the chunks that hold [lo, hi): lanes outside it are scaled and
        # exponentiated too (finite: scores are), then set to 0 below
        c0 = lo // 16 * 16
        c1 = (hi + 15) // 16 * 16
        sv = vsplat(scale32)
        for c in range(c0, c1, 16):
            vst(row, c, vmul(vld(row, c), sv))
        if cap32 > 0.0:
            for j in range(lo, hi):
                row[j] = cap32 * np.float32(math.tanh(row[j] / cap32))
        # the maximum over [lo, hi): whole chunks in lanes, the partial ones at its ends one by one
        f0 = min(hi, (lo + 15) // 16 * 16)
        f1 = max(f0, hi // 16 * 16)
        mv = vsplat(np.float32(-np.inf))
        for c in range(f0, f1, 16):
            mv = vmax(mv, vld(row, c))
        m = vhmax(mv)
        for j in range(lo, f0):
            m = max(m, row[j])
        for j in range(f1, hi):
            m = max(m, row[j])
        mv = vsplat(m)
        for c in range(c0, c1, 16):
            vst(row, c, vexp(vsub(vld(row, c), mv)))
        for j in range(0, lo):
            row[j] = 0.0
        for j in range(hi, width):
            row[j] = 0.0
        t = np.float32(0.0)
        for b in range(0, width, block):
            acc = vzero()
            for c in range(b, b + block, 16):
                acc = vadd(acc, vld(row, c))
            t += vhsum(acc)
        total[i] = t


def segment_attention(q: np.ndarray, positions: np.ndarray, table: np.ndarray, k_store: np.ndarray,
                      v_store: np.ndarray, n_heads: int, n_kv_heads: int, key_dim: int, value_dim: int,
                      scale: float, cap: float, window: int, a: int, b: int, out: np.ndarray,
                      pool: Executor | None = None) -> None:
    """out[a:b] = causal GQA attention of rows a..b, one sequence's consecutive positions, over
    that sequence's paged K/V (`table`: its page numbers); `window` > 0 limits each row to its
    last `window` keys, `cap` > 0 soft-caps the scores (cap * tanh(s / cap))."""
    block = BLOCK
    page_size = k_store.shape[1]
    pos = positions[a:b]
    p0, p1 = int(pos[0]), int(pos[-1])
    key0 = (max(0, p0 - window + 1) if window > 0 else 0) // block * block  # the grid's first block in use
    page0 = key0 // page_size
    skip = key0 - page0 * page_size
    n_keys = p1 + 1 - key0
    n_blocks = -(-n_keys // block)
    # one gather per layer and segment, zero-padded to whole blocks: every task reads these
    pages = table[page0:p1 // page_size + 1]
    keys = np.zeros((n_blocks * block, k_store.shape[2]), np.float32)
    values = np.zeros((n_blocks * block, v_store.shape[2]), np.float32)
    keys[:n_keys] = k_store[pages].reshape(-1, k_store.shape[2])[skip:skip + n_keys]
    values[:n_keys] = v_store[pages].reshape(-1, v_store.shape[2])[skip:skip + n_keys]
    group = n_heads // n_kv_heads
    rows = b - a
    m_rows = QUERY_ROWS * group
    # query tiles on a grid of positions anchored at 0, as the key blocks are: a row sits at the
    # same place in its tile's product whatever the segment, as some BLAS kernels' bits depend on
    # a row's place (OpenBLAS's Haswell sgemm, AMD EPYC: a row moved by 1-11 of 192 changed bits)
    starts = range(p0 // QUERY_ROWS * QUERY_ROWS, p1 + 1, QUERY_ROWS)
    tasks = [(h, max(0, t - p0), min(rows, t + QUERY_ROWS - p0)) for h in range(n_kv_heads) for t in starts]

    def task(h: int, r0: int, r1: int) -> None:
        used = (r1 - r0) * group
        at = int(pos[r0]) % QUERY_ROWS * group  # the tile's first row's place on the grid
        qb = np.zeros((m_rows, key_dim), np.float32)
        qb[at:at + used] = q[a + r0:a + r1, h * group * key_dim:(h + 1) * group * key_dim].reshape(used, key_dim)
        qpos = np.full(m_rows, pos[r1 - 1], np.int64)  # padding rows: any position, their output is dropped
        qpos[at:at + used] = np.repeat(pos[r0:r1], group)  # each row's group of heads, row by row
        # blocks from the first one the tile's first row can see to the one holding its last row
        first = (max(0, int(pos[r0]) - window + 1 - key0) if window > 0 else 0) // block
        last = (int(pos[r1 - 1]) - key0) // block + 1
        kh = keys[:, h * key_dim:(h + 1) * key_dim]
        vh = values[:, h * value_dim:(h + 1) * value_dim]
        s = np.empty((m_rows, (last - first) * block), np.float32)
        for j in range(first, last):
            np.matmul(qb, kh[j * block:(j + 1) * block].T, out=s[:, (j - first) * block:(j - first + 1) * block])
        total = np.empty(m_rows, np.float32)
        block_softmax(s, qpos, key0 + first * block, window, scale, cap, block, total)
        o = np.zeros((m_rows, value_dim), np.float32)
        for j in range(first, last):
            o += s[:, (j - first) * block:(j - first + 1) * block] @ vh[j * block:(j + 1) * block]
        o /= total[:, None]
        out[a + r0:a + r1, h * group * value_dim:(h + 1) * group * value_dim] = o[at:at + used].reshape(r1 - r0, -1)

    if pool is None or len(tasks) == 1:
        for t in tasks:
            task(*t)
        return
    for future in [pool.submit(task, *t) for t in tasks]:
        future.result()
