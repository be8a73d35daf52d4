"""Numba kernels for the non-matmul ops of the cpu backend (matmuls live in `kernels/`).

Each mirrors the reference definition in backends/reference/ops.py; float32 storage with
float32 arithmetic (float64 where a reduction is long), parallel over rows or heads.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from llamay_backends.cpu.kernels._simd import vadd, vexp, vfma_s, vfma_vx, vhsum, vld, vsplat, vst, vsub, vzero

_par = njit(parallel=True, fastmath=True, cache=True)
_ser = njit(fastmath=True, cache=True)


@_par
def rms_norm(x, w, has_weight, eps, group, offset, out):
    t_count, width = x.shape
    g = group if group > 0 else width
    n_groups = width // g
    for idx in prange(t_count * n_groups):
        t = idx // n_groups
        base = (idx % n_groups) * g
        ss = 0.0
        for i in range(g):
            v = x[t, base + i]
            ss += v * v
        inv = 1.0 / math.sqrt(ss / g + eps)
        if has_weight:
            for i in range(g):
                out[t, base + i] = x[t, base + i] * inv * (w[i if group > 0 else base + i] + offset)
        else:
            for i in range(g):
                out[t, base + i] = x[t, base + i] * inv


@_par
def add(a, b, out):
    t_count, width = a.shape
    for t in prange(t_count):
        for i in range(width):
            out[t, i] = a[t, i] + b[t, i]


@_par
def mul(a, b, out):
    t_count, width = a.shape
    for t in prange(t_count):
        for i in range(width):
            out[t, i] = a[t, i] * b[t, i]


@_par
def scale(x, factor, out):
    t_count, width = x.shape
    for t in prange(t_count):
        for i in range(width):
            out[t, i] = x[t, i] * factor


@_par
def add_bias(x, bias):
    t_count, width = x.shape
    for t in prange(t_count):
        for i in range(width):
            x[t, i] += bias[i]


@_par
def silu_mul(gate, up, out):
    t_count, width = gate.shape
    for t in prange(t_count):
        for i in range(width):
            g = gate[t, i]
            out[t, i] = g / (1.0 + math.exp(-g)) * up[t, i]


@_par
def gelu_mul(gate, up, out):
    t_count, width = gate.shape
    c = math.sqrt(2.0 / math.pi)
    for t in prange(t_count):
        for i in range(width):
            g = gate[t, i]
            out[t, i] = 0.5 * g * (1.0 + math.tanh(c * (g + 0.044715 * g * g * g))) * up[t, i]


@_par
def softcap(x, cap, out):
    t_count, width = x.shape
    for t in prange(t_count):
        for i in range(width):
            out[t, i] = cap * math.tanh(x[t, i] / cap)


@_par
def rope(x, positions, n_heads, head_dim, n_rot, neox, inv_freq, freq_scale, out):
    """inv_freq[i] = base^(-2i/n_rot) in float64; angles computed in float64 like the reference."""
    t_count = x.shape[0]
    half = n_rot // 2
    for idx in prange(t_count * n_heads):
        t = idx // n_heads
        base = (idx % n_heads) * head_dim
        pos = positions[t] * freq_scale
        for i in range(half):
            theta = pos * inv_freq[i]
            c = math.cos(theta)
            s = math.sin(theta)
            if neox:
                a = x[t, base + i]
                b = x[t, base + i + half]
                out[t, base + i] = a * c - b * s
                out[t, base + i + half] = a * s + b * c
            else:
                a = x[t, base + 2 * i]
                b = x[t, base + 2 * i + 1]
                out[t, base + 2 * i] = a * c - b * s
                out[t, base + 2 * i + 1] = a * s + b * c
        for i in range(n_rot, head_dim):
            out[t, base + i] = x[t, base + i]


@_par
def kv_write_f32(k, v, pages, slots, k_store, v_store):
    for t in prange(k.shape[0]):
        p = pages[t]
        s = slots[t]
        for i in range(k.shape[1]):
            k_store[p, s, i] = k[t, i]
        for i in range(v.shape[1]):
            v_store[p, s, i] = v[t, i]


# Rows of one sequence whose attention is computed together (prefill), sharing each K/V page
# they read across the tile's rows and the heads of a GQA group.
QUERY_TILE = 16


def query_tiles(segments: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(first row, end row) of each query tile: each segment (a, b) of one sequence's rows cut
    into QUERY_TILE-row tiles counted from a, so a tile depends on its own sequence only."""
    bounds = [(r, min(r + QUERY_TILE, b)) for a, b in segments for r in range(a, b, QUERY_TILE)]
    lo = np.array([r for r, _ in bounds], np.int64)
    hi = np.array([e for _, e in bounds], np.int64)
    return lo, hi


def attention_f32(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                  key_dim, value_dim, scale, cap, window, out, segments=()):
    """Causal GQA attention over paged f32 K/V: out[t, head] for every token and head.

    segments: (a, b) row ranges, each of one sequence's rows (prefill), computed in query tiles
    (`query_tiles`); every other row gets one task per head. A row's result depends only on
    which of the two it is, never on other sequences in the pass."""
    if key_dim % 32 != 0 or value_dim % 64 != 0:
        _attention_scalar(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                          key_dim, value_dim, scale, cap, window, out)
        return
    if not segments:
        rows = np.arange(q.shape[0], dtype=np.int64)
    else:
        tiled = np.zeros(q.shape[0], np.bool_)
        for a, b in segments:
            tiled[a:b] = True
        rows = np.nonzero(~tiled)[0]
        lo, hi = query_tiles(list(segments))
        _attention_tiles(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                         key_dim, value_dim, scale, cap, window, lo, hi, out)
    if len(rows):
        _attention_vec(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                       key_dim, value_dim, scale, cap, window, rows, out)


@_par
def _attention_tiles(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                     key_dim, value_dim, scale, cap, window, tile_lo, tile_hi, out):
    # One task per (query tile, KV head): the tile's rows times the group's heads are up to
    # QUERY_TILE * group queries, and each K/V page is read once for all of them while it sits
    # in L1 (one task per token and head re-read every visible page per query: at 4k keys,
    # 2 MiB of K/V per head, from L3 or DRAM). Each query still sees its keys in ascending order
    # through the same dot, exp and FMA steps as `_attention_vec`.
    page_size = k_store.shape[1]
    group = n_heads // n_kv_heads
    scale32 = np.float32(scale)
    cap32 = np.float32(cap)
    for idx in prange(tile_lo.shape[0] * n_kv_heads):
        lo = tile_lo[idx // n_kv_heads]
        kvh = idx % n_kv_heads
        nq = (tile_hi[idx // n_kv_heads] - lo) * group
        table = page_tables[seq_index[lo]]
        firsts = np.empty(nq, np.int64)
        ms = np.full(nq, -np.inf, np.float32)
        kmin = positions[lo]
        kmax = positions[lo]
        longest = 0
        for qi in range(nq):
            pos = positions[lo + qi // group]
            first = 0
            if window > 0 and pos - window + 1 > 0:
                first = pos - window + 1
            firsts[qi] = first
            kmin = min(kmin, first)
            kmax = max(kmax, pos)
            longest = max(longest, pos + 1 - first)
        scores = np.empty((nq, (longest + 15) // 16 * 16), np.float32)
        ko = kvh * key_dim
        vo = kvh * value_dim
        for pi in range(kmin // page_size, kmax // page_size + 1):
            page = table[pi]
            base = pi * page_size
            for qi in range(nq):
                t = lo + qi // group
                first = firsts[qi]
                s0 = max(first, base) - base
                s1 = min(positions[t] + 1, base + page_size) - base
                qrow = q[t]
                qo = (kvh * group + qi % group) * key_dim
                srow = scores[qi]
                m = ms[qi]
                for s in range(s0, s1):
                    krow = k_store[page, s]
                    acc = vzero()
                    acc2 = vzero()
                    for c in range(0, key_dim, 32):
                        acc = vfma_vx(acc, vld(qrow, qo + c), krow, ko + c)
                        acc2 = vfma_vx(acc2, vld(qrow, qo + c + 16), krow, ko + c + 16)
                    sc = vhsum(vadd(acc, acc2)) * scale32
                    if cap32 > 0.0:
                        sc = cap32 * np.float32(math.tanh(sc / cap32))
                    srow[base + s - first] = sc
                    if sc > m:
                        m = sc
                ms[qi] = m
        invs = np.empty(nq, np.float32)
        for qi in range(nq):
            srow = scores[qi]
            n = positions[lo + qi // group] + 1 - firsts[qi]
            n16 = (n + 15) // 16 * 16
            for i in range(n, n16):
                srow[i] = ms[qi]
            mv = vsplat(ms[qi])
            for i in range(0, n16, 16):
                vst(srow, i, vexp(vsub(vld(srow, i), mv)))
            for i in range(n, n16):
                srow[i] = 0.0
            dv = vzero()
            for i in range(0, n16, 16):
                dv = vadd(dv, vld(srow, i))
            invs[qi] = np.float32(1.0) / vhsum(dv)
        acc_v = np.zeros((nq, value_dim), np.float32)
        for pi in range(kmin // page_size, kmax // page_size + 1):
            page = table[pi]
            base = pi * page_size
            for qi in range(nq):
                t = lo + qi // group
                first = firsts[qi]
                s0 = max(first, base) - base
                s1 = min(positions[t] + 1, base + page_size) - base
                if s0 >= s1:
                    continue
                srow = scores[qi]
                arow = acc_v[qi]
                for c in range(0, value_dim, 64):
                    a0 = vld(arow, c)
                    a1 = vld(arow, c + 16)
                    a2 = vld(arow, c + 32)
                    a3 = vld(arow, c + 48)
                    for s in range(s0, s1):
                        vrow = v_store[page, s]
                        w = srow[base + s - first]
                        a0 = vfma_s(a0, vld(vrow, vo + c), w)
                        a1 = vfma_s(a1, vld(vrow, vo + c + 16), w)
                        a2 = vfma_s(a2, vld(vrow, vo + c + 32), w)
                        a3 = vfma_s(a3, vld(vrow, vo + c + 48), w)
                    vst(arow, c, a0)
                    vst(arow, c + 16, a1)
                    vst(arow, c + 32, a2)
                    vst(arow, c + 48, a3)
        for qi in range(nq):
            orow = out[lo + qi // group]
            oo = (kvh * group + qi % group) * value_dim
            arow = acc_v[qi]
            for c in range(0, value_dim, 16):
                vst(orow, oo + c, vfma_s(vzero(), vld(arow, c), invs[qi]))


@_par
def _attention_vec(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                   key_dim, value_dim, scale, cap, window, rows, out):
    # One task per (token, head) for the given rows, as the scalar kernel, so a token's result
    # never depends on the batch. Keys are walked page by page (no division per key) and the
    # head dimension in 16-lane registers: a dot is key_dim/16 FMAs and one lane sum; the weighted sum of values
    # keeps one 16-lane chunk of the output in a register across all keys.
    page_size = k_store.shape[1]
    group = n_heads // n_kv_heads
    scale32 = np.float32(scale)
    cap32 = np.float32(cap)
    for idx in prange(rows.shape[0] * n_heads):
        t = rows[idx // n_heads]
        h = idx % n_heads
        kvh = h // group
        pos = positions[t]
        table = page_tables[seq_index[t]]
        first = 0
        if window > 0 and pos - window + 1 > 0:
            first = pos - window + 1
        n = pos + 1 - first
        n16 = (n + 15) // 16 * 16
        scores = np.empty(n16, np.float32)
        qrow = q[t]
        qo = h * key_dim
        ko = kvh * key_dim
        vo = kvh * value_dim
        m = np.float32(-np.inf)
        j = 0
        key = first
        while key <= pos:
            page = table[key // page_size]
            end = min(pos + 1, (key // page_size + 1) * page_size)
            for s in range(key % page_size, key % page_size + end - key):
                krow = k_store[page, s]
                acc = vzero()
                acc2 = vzero()
                for c in range(0, key_dim, 32):
                    acc = vfma_vx(acc, vld(qrow, qo + c), krow, ko + c)
                    acc2 = vfma_vx(acc2, vld(qrow, qo + c + 16), krow, ko + c + 16)
                sc = vhsum(vadd(acc, acc2)) * scale32
                if cap32 > 0.0:
                    sc = cap32 * np.float32(math.tanh(sc / cap32))
                scores[j] = sc
                if sc > m:
                    m = sc
                j += 1
            key = end
        # softmax weights 16 at a time; the padding past n is zeroed before the sum
        for i in range(n, n16):
            scores[i] = m
        mv = vsplat(m)
        for i in range(0, n16, 16):
            vst(scores, i, vexp(vsub(vld(scores, i), mv)))
        for i in range(n, n16):
            scores[i] = 0.0
        dv = vzero()
        for i in range(0, n16, 16):
            dv = vadd(dv, vld(scores, i))
        inv = np.float32(1.0) / vhsum(dv)
        orow = out[t]
        oo = h * value_dim
        for c in range(0, value_dim, 64):
            a0 = vzero()
            a1 = vzero()
            a2 = vzero()
            a3 = vzero()
            j = 0
            key = first
            while key <= pos:
                page = table[key // page_size]
                end = min(pos + 1, (key // page_size + 1) * page_size)
                for s in range(key % page_size, key % page_size + end - key):
                    vrow = v_store[page, s]
                    w = scores[j]
                    a0 = vfma_s(a0, vld(vrow, vo + c), w)
                    a1 = vfma_s(a1, vld(vrow, vo + c + 16), w)
                    a2 = vfma_s(a2, vld(vrow, vo + c + 32), w)
                    a3 = vfma_s(a3, vld(vrow, vo + c + 48), w)
                    j += 1
                key = end
            vst(orow, oo + c, vfma_s(vzero(), a0, inv))
            vst(orow, oo + c + 16, vfma_s(vzero(), a1, inv))
            vst(orow, oo + c + 32, vfma_s(vzero(), a2, inv))
            vst(orow, oo + c + 48, vfma_s(vzero(), a3, inv))


@_par
def _attention_scalar(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                      key_dim, value_dim, scale, cap, window, out):
    """Causal GQA attention over paged K/V, one task per (token, head).

    Two passes over the visible keys (scores, then the weighted sum of values) keep the inner
    loops contiguous over the head dimension, so they vectorise.
    """
    t_count = q.shape[0]
    page_size = k_store.shape[1]
    group = n_heads // n_kv_heads
    for idx in prange(t_count * n_heads):
        t = idx // n_heads
        h = idx % n_heads
        kvh = h // group
        pos = positions[t]
        table = page_tables[seq_index[t]]
        first = 0
        if window > 0 and pos - window + 1 > 0:
            first = pos - window + 1
        n = pos + 1 - first
        scores = np.empty(n, np.float32)
        qh = q[t, h * key_dim:(h + 1) * key_dim]
        ko = kvh * key_dim
        vo = kvh * value_dim
        m = -np.inf
        for j in range(n):
            key = first + j
            krow = k_store[table[key // page_size], key % page_size, ko:ko + key_dim]
            sc = np.float32(0.0)
            for d in range(key_dim):
                sc += qh[d] * krow[d]
            sc *= scale
            if cap > 0.0:
                sc = cap * math.tanh(sc / cap)
            scores[j] = sc
            if sc > m:
                m = sc
        denom = 0.0
        for j in range(n):
            e = math.exp(scores[j] - m)
            scores[j] = e
            denom += e
        o = out[t, h * value_dim:(h + 1) * value_dim]
        for d in range(value_dim):
            o[d] = 0.0
        for j in range(n):
            key = first + j
            vrow = v_store[table[key // page_size], key % page_size, vo:vo + value_dim]
            w = scores[j]
            for d in range(value_dim):
                o[d] += w * vrow[d]
        inv = np.float32(1.0 / denom)
        for d in range(value_dim):
            o[d] *= inv
