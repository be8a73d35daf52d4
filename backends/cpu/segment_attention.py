"""Prefill attention of a long segment (one sequence's rows) as float32 GEMMs over its K/V.

A segment's queries for one KV head are a [rows x group, key_dim] block and its visible keys one
[n_keys, key_dim] block, so scores and the weighted sum of values are matrix products that BLAS
runs near the core's peak; the Numba tile kernel this replaced summed every score with a
horizontal add and streamed a tile's scores three times (~56 GFLOP/s at 4k keys). The work is cut
into (KV head, query tile) tasks shared out over the plan's threads, each running a one-thread
sgemm (the plan limits BLAS to one thread during prefill).

A row's bits must not depend on how its prompt was cut into passes (a forked context's question
and the same text prefilled at once must generate the same tokens): every product has the same
shape whatever the segment (QUERY_ROWS x group rows, zero-padded; BLOCK keys, on a grid anchored
at key 0, zero-padded), scores sum per block, and blocks add in key order. Keys past a row's
position weigh exactly 0, so a longer segment adds only zeros to it.
"""
from __future__ import annotations

from concurrent.futures import Executor

import numpy as np

QUERY_ROWS = 64  # query rows per task
BLOCK = 512  # keys per product: the reduction length of every score sum and weighted value sum


def segment_attention(q: np.ndarray, positions: np.ndarray, table: np.ndarray, k_store: np.ndarray,
                      v_store: np.ndarray, n_heads: int, n_kv_heads: int, key_dim: int, value_dim: int,
                      scale: float, cap: float, window: int, a: int, b: int, out: np.ndarray,
                      pool: Executor | None = None) -> None:
    """out[a:b] = causal GQA attention of rows a..b, one sequence's consecutive positions, over
    that sequence's paged K/V (`table`: its page numbers); `window` > 0 limits each row to its
    last `window` keys, `cap` > 0 soft-caps the scores (cap * tanh(s / cap))."""
    page_size = k_store.shape[1]
    pos = positions[a:b]
    p0, p1 = int(pos[0]), int(pos[-1])
    key0 = (max(0, p0 - window + 1) if window > 0 else 0) // BLOCK * BLOCK  # the grid's first block in use
    page0 = key0 // page_size
    skip = key0 - page0 * page_size
    n_keys = p1 + 1 - key0
    n_blocks = -(-n_keys // BLOCK)
    # one gather per layer and segment, zero-padded to whole blocks: every task reads these
    pages = table[page0:p1 // page_size + 1]
    keys = np.zeros((n_blocks * BLOCK, k_store.shape[2]), np.float32)
    values = np.zeros((n_blocks * BLOCK, v_store.shape[2]), np.float32)
    keys[:n_keys] = k_store[pages].reshape(-1, k_store.shape[2])[skip:skip + n_keys]
    values[:n_keys] = v_store[pages].reshape(-1, v_store.shape[2])[skip:skip + n_keys]
    group = n_heads // n_kv_heads
    rows = b - a
    m_rows = QUERY_ROWS * group
    tasks = [(h, r0, min(rows, r0 + QUERY_ROWS)) for h in range(n_kv_heads) for r0 in range(0, rows, QUERY_ROWS)]

    def task(h: int, r0: int, r1: int) -> None:
        used = (r1 - r0) * group
        qb = np.zeros((m_rows, key_dim), np.float32)
        qb[:used] = q[a + r0:a + r1, h * group * key_dim:(h + 1) * group * key_dim].reshape(used, key_dim)
        qpos = np.full(m_rows, pos[r1 - 1], np.int64)  # padding rows: any position, their output is dropped
        qpos[:used] = np.repeat(pos[r0:r1], group)  # each row's group of heads, row by row
        blocks = -(-(int(pos[r1 - 1]) + 1 - key0) // BLOCK)
        kh = keys[:, h * key_dim:(h + 1) * key_dim]
        vh = values[:, h * value_dim:(h + 1) * value_dim]
        s = np.empty((m_rows, blocks * BLOCK), np.float32)
        for j in range(blocks):
            s[:, j * BLOCK:(j + 1) * BLOCK] = qb @ kh[j * BLOCK:(j + 1) * BLOCK].T
        s *= np.float32(scale)
        if cap > 0.0:
            np.tanh(s / np.float32(cap), out=s)
            s *= np.float32(cap)
        # causal: only keys from the tile's first position on can lie ahead of a row (padding too)
        ahead = max(0, int(pos[r0]) + 1 - key0)
        band = np.arange(key0 + ahead, key0 + blocks * BLOCK)
        s[:, ahead:][band[None, :] > qpos[:, None]] = -np.inf
        if window > 0:  # keys before the tile's last row's window may lie behind a row's window
            behind = max(0, int(pos[r1 - 1]) - window + 1 - key0)
            if behind > 0:
                band = np.arange(key0, key0 + behind)
                s[:, :behind][band[None, :] < (qpos - window + 1)[:, None]] = -np.inf
        s -= s.max(axis=1, keepdims=True)
        np.exp(s, out=s)
        total = np.zeros(m_rows, np.float32)
        o = np.zeros((m_rows, value_dim), np.float32)
        for j in range(blocks):
            weights = s[:, j * BLOCK:(j + 1) * BLOCK]
            total += weights.sum(axis=1)
            o += weights @ vh[j * BLOCK:(j + 1) * BLOCK]
        o /= total[:, None]
        out[a + r0:a + r1, h * group * value_dim:(h + 1) * group * value_dim] = o[:used].reshape(r1 - r0, -1)

    if pool is None or len(tasks) == 1:
        for t in tasks:
            task(*t)
        return
    for future in [pool.submit(task, *t) for t in tasks]:
        future.result()
