"""Numba kernels for the non-matmul ops of the cpu backend (matmuls live in `kernels/`).

Each mirrors the reference definition in backends/reference/ops.py; float32 storage with
float32 arithmetic (float64 where a reduction is long), parallel over rows or heads.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from llamay_backends.cpu.kernels._simd import (
    f16_bits,
    vadd,
    vfma_vh,
    vld_f16,
    vexp,
    vfma_s,
    vfma_vx,
    vgelu_mul,
    vhmax,
    vhsum,
    vld,
    vmax,
    vmul,
    vsilu_mul,
    vsplat,
    vst,
    vst_f16,
    vst_hsum4,
    vsub,
    vzero,
)
from llamay_backends.cpu.segment_attention import segment_attention

_par = njit(parallel=True, fastmath=True, cache=True)
# The row kernels of the elementwise ops and their parallel drivers: no fast-math (said
# explicitly: Numba hands a caller's fast-math to callees that leave it unset), so a row's
# arithmetic is the order the source says whether the kernel runs on the calling thread or
# inlined in a parallel loop, and a row's bits do not depend on the pass; error_model="numpy":
# IEEE results (inf, nan) rather than a Python ZeroDivisionError.
_ser = njit(fastmath=False, cache=True, error_model="numpy")
_rows_par = njit(parallel=True, fastmath=False, cache=True, error_model="numpy")


# Each elementwise op is a serial kernel over a range of rows (`_*_rows`) and a public function
# that runs it on the calling thread for a few rows and over Numba's threads otherwise: a decode
# token runs ~9 such ops per layer on a few hundred floats each, where waking the thread pool
# (~10-15 us) cost more than the op (measured: 271 calls, 17.6 us each, on smollm2's 16 ms
# token). Both paths run the same row kernel, so a row's bits do not depend on how many rows
# share the pass.
SERIAL_ROWS = 16


@_ser
def _rms_norm_rows(x, w, has_weight, eps, group, offset, out, t0, t1):
    # Per group: 16 running float32 sums of squares, one float64 total, float32 scaling. Each group
    # goes through slices starting at 0: loops over x[t, base + i] did not vectorise (a scalar
    # float64 sum and those loops cost ~3 ns per element, now ~0.3).
    width = x.shape[1]
    wo = np.float32(offset)
    g = group if group > 0 else width
    vec = g // 16 * 16
    for t in range(t0, t1):
        for base in range(0, width - g + 1, g):
            xs = x[t, base:base + g]
            os_ = out[t, base:base + g]
            acc = vzero()
            for i in range(0, vec, 16):
                acc = vfma_vx(acc, vld(xs, i), xs, i)
            ss = np.float64(vhsum(acc))
            for i in range(vec, g):
                ss += xs[i] * xs[i]
            inv = np.float32(1.0 / math.sqrt(ss / g + eps))
            if has_weight:  # w has g entries: the row's (group 0) or each head's (per-head norms)
                for i in range(g):
                    os_[i] = xs[i] * inv * (w[i] + wo)
            else:
                for i in range(g):
                    os_[i] = xs[i] * inv


@_rows_par
def _rms_norm_par(x, w, has_weight, eps, group, offset, out):
    for t in prange(x.shape[0]):
        _rms_norm_rows(x, w, has_weight, eps, group, offset, out, t, t + 1)


def rms_norm(x, w, has_weight, eps, group, offset, out):
    if x.shape[0] <= SERIAL_ROWS:
        _rms_norm_rows(x, w, has_weight, eps, group, offset, out, 0, x.shape[0])
    else:
        _rms_norm_par(x, w, has_weight, eps, group, offset, out)


@_ser
def _add_rows(a, b, out, t0, t1):
    for t in range(t0, t1):
        ar, br, orow = a[t], b[t], out[t]  # rows: loops over [t, i] did not vectorise
        for i in range(ar.shape[0]):
            orow[i] = ar[i] + br[i]


@_rows_par
def _add_par(a, b, out):
    for t in prange(a.shape[0]):
        _add_rows(a, b, out, t, t + 1)


def add(a, b, out):
    if a.shape[0] <= SERIAL_ROWS:
        _add_rows(a, b, out, 0, a.shape[0])
    else:
        _add_par(a, b, out)


@_ser
def _mul_rows(a, b, out, t0, t1):
    for t in range(t0, t1):
        ar, br, orow = a[t], b[t], out[t]
        for i in range(ar.shape[0]):
            orow[i] = ar[i] * br[i]


@_rows_par
def _mul_par(a, b, out):
    for t in prange(a.shape[0]):
        _mul_rows(a, b, out, t, t + 1)


def mul(a, b, out):
    if a.shape[0] <= SERIAL_ROWS:
        _mul_rows(a, b, out, 0, a.shape[0])
    else:
        _mul_par(a, b, out)


@_ser
def _scale_rows(x, factor, out, t0, t1):
    for t in range(t0, t1):
        xr, orow = x[t], out[t]
        for i in range(xr.shape[0]):
            orow[i] = xr[i] * factor


@_rows_par
def _scale_par(x, factor, out):
    for t in prange(x.shape[0]):
        _scale_rows(x, factor, out, t, t + 1)


def scale(x, factor, out):
    if x.shape[0] <= SERIAL_ROWS:
        _scale_rows(x, factor, out, 0, x.shape[0])
    else:
        _scale_par(x, factor, out)


@_ser
def _add_bias_rows(x, bias, t0, t1):
    for t in range(t0, t1):
        xr = x[t]
        for i in range(xr.shape[0]):
            xr[i] += bias[i]


@_rows_par
def _add_bias_par(x, bias):
    for t in prange(x.shape[0]):
        _add_bias_rows(x, bias, t, t + 1)


def add_bias(x, bias):
    if x.shape[0] <= SERIAL_ROWS:
        _add_bias_rows(x, bias, 0, x.shape[0])
    else:
        _add_bias_par(x, bias)


# (Not fast-math matters here too: the vector exp overflows to inf for gate < -88, which IEEE
# arithmetic turns into the right 0; under fast-math's no-infs assumption LLVM may make it NaN.)
@_ser
def _silu_mul_rows(gate, up, out, t0, t1):
    width = gate.shape[1]
    vec = width // 16 * 16
    for t in range(t0, t1):
        gr, ur, orow = gate[t], up[t], out[t]
        for i in range(0, vec, 16):  # 16 lanes at a time: a scalar exp per element cost ~8 ns
            vst(orow, i, vsilu_mul(vld(gr, i), vld(ur, i)))
        for i in range(vec, width):
            g = gr[i]
            orow[i] = g / (1.0 + math.exp(-g)) * ur[i]


@_rows_par
def _silu_mul_par(gate, up, out):
    for t in prange(gate.shape[0]):
        _silu_mul_rows(gate, up, out, t, t + 1)


def silu_mul(gate, up, out):
    if gate.shape[0] <= SERIAL_ROWS:
        _silu_mul_rows(gate, up, out, 0, gate.shape[0])
    else:
        _silu_mul_par(gate, up, out)


@_ser
def _gelu_mul_rows(gate, up, out, t0, t1):
    # tanh-form gelu as g / (1 + exp(-2z)), 16 lanes at a time (`vgelu_mul`): the scalar float64
    # tanh cost ~15 ns per element, a quarter of gemma3's prefill outside the matmuls
    width = gate.shape[1]
    vec = width // 16 * 16
    k0 = np.float32(-2.0 * math.sqrt(2.0 / math.pi))
    k1 = np.float32(0.044715) * k0
    for t in range(t0, t1):
        gr, ur, orow = gate[t], up[t], out[t]
        for i in range(0, vec, 16):
            vst(orow, i, vgelu_mul(vld(gr, i), vld(ur, i)))
        for i in range(vec, width):
            g = gr[i]
            orow[i] = g / (np.float32(1.0) + np.exp(g * (k0 + k1 * g * g))) * ur[i]


@_rows_par
def _gelu_mul_par(gate, up, out):
    for t in prange(gate.shape[0]):
        _gelu_mul_rows(gate, up, out, t, t + 1)


def gelu_mul(gate, up, out):
    if gate.shape[0] <= SERIAL_ROWS:
        _gelu_mul_rows(gate, up, out, 0, gate.shape[0])
    else:
        _gelu_mul_par(gate, up, out)


@_ser
def _softcap_rows(x, cap, out, t0, t1):
    for t in range(t0, t1):
        xr, orow = x[t], out[t]
        for i in range(xr.shape[0]):
            orow[i] = cap * math.tanh(xr[i] / cap)


@_rows_par
def _softcap_par(x, cap, out):
    for t in prange(x.shape[0]):
        _softcap_rows(x, cap, out, t, t + 1)


def softcap(x, cap, out):
    if x.shape[0] <= SERIAL_ROWS:
        _softcap_rows(x, cap, out, 0, x.shape[0])
    else:
        _softcap_par(x, cap, out)


@_ser
def _rope_angle_rows(positions, inv_freq, freq_scale, cos, sin, t0, t1):
    for t in range(t0, t1):
        pos = positions[t] * freq_scale
        for i in range(inv_freq.shape[0]):
            theta = pos * inv_freq[i]
            cos[t, i] = math.cos(theta)
            sin[t, i] = math.sin(theta)


@_rows_par
def _rope_angle_par(positions, inv_freq, freq_scale, cos, sin):
    for t in prange(positions.shape[0]):
        _rope_angle_rows(positions, inv_freq, freq_scale, cos, sin, t, t + 1)


def rope_angles(positions, inv_freq, freq_scale):
    """(cos, sin), float64[len(positions), len(inv_freq)], of the angles positions * freq_scale *
    inv_freq (inv_freq[i] = base^(-2i/n_rot), float64 like the reference): the same for every
    head and every layer with these frequencies, so a pass computes them once (the trigonometry
    was most of a prefill's rope time)."""
    n, half = positions.shape[0], inv_freq.shape[0]
    cos = np.empty((n, half))
    sin = np.empty((n, half))
    if n <= SERIAL_ROWS:
        _rope_angle_rows(positions, inv_freq, freq_scale, cos, sin, 0, n)
    else:
        _rope_angle_par(positions, inv_freq, freq_scale, cos, sin)
    return cos, sin


@_ser
def _rope_rows(x, cos_t, sin_t, n_heads, head_dim, n_rot, neox, out, t0, t1):
    half = n_rot // 2
    for t in range(t0, t1):
        cos, sin = cos_t[t], sin_t[t]
        for h in range(n_heads):
            # one head as slices from 0: indexing [t, base + i] kept these loops scalar
            xh = x[t, h * head_dim:(h + 1) * head_dim]
            oh = out[t, h * head_dim:(h + 1) * head_dim]
            if neox:
                for i in range(half):
                    a = xh[i]
                    b = xh[i + half]
                    oh[i] = a * cos[i] - b * sin[i]
                    oh[i + half] = a * sin[i] + b * cos[i]
            else:
                for i in range(half):
                    a = xh[2 * i]
                    b = xh[2 * i + 1]
                    oh[2 * i] = a * cos[i] - b * sin[i]
                    oh[2 * i + 1] = a * sin[i] + b * cos[i]
            for i in range(n_rot, head_dim):
                oh[i] = xh[i]


@_rows_par
def _rope_par(x, cos, sin, n_heads, head_dim, n_rot, neox, out):
    for t in prange(x.shape[0]):
        _rope_rows(x, cos, sin, n_heads, head_dim, n_rot, neox, out, t, t + 1)


def rope_rotate(x, cos, sin, n_heads, head_dim, n_rot, neox, out):
    """Rotate x's heads by angles from `rope_angles` (rows of cos, sin match rows of x)."""
    if x.shape[0] <= SERIAL_ROWS:
        _rope_rows(x, cos, sin, n_heads, head_dim, n_rot, neox, out, 0, x.shape[0])
    else:
        _rope_par(x, cos, sin, n_heads, head_dim, n_rot, neox, out)


@_ser
def _kv_write_rows(k, v, pages, slots, k_store, v_store, t0, t1):
    # K/V stores of float32, or of float16 viewed as bytes (`_kv_put`)
    for t in range(t0, t1):
        _kv_put(k_store[pages[t], slots[t]], k[t])
        _kv_put(v_store[pages[t], slots[t]], v[t])


def _kv_put(slot, row):  # pragma: no cover - compiled only
    """In compiled code: one key's or value's row into its slot of a K/V store (`_kv_width`'s
    kinds): as it is, or as float16 rounded to nearest even, as NumPy's float16 stores round it."""


@overload(_kv_put)
def _kv_put_impl(slot, row):
    if slot.dtype == types.float32:
        def put_f32(slot, row):
            for i in range(row.shape[0]):
                slot[i] = row[i]
        return put_f32
    if slot.dtype == types.uint8:
        def put_f16(slot, row):
            n = row.shape[0]
            for i in range(0, n - 15, 16):
                vst_f16(slot, 2 * i, vld(row, i))
            for i in range(n - n % 16, n):
                h = f16_bits(np.float32(row[i]))
                slot[2 * i] = h & 0xFF
                slot[2 * i + 1] = h >> 8
        return put_f16
    return None


@_rows_par
def _kv_write_par(k, v, pages, slots, k_store, v_store):
    for t in prange(k.shape[0]):
        _kv_write_rows(k, v, pages, slots, k_store, v_store, t, t + 1)


def kv_write(k, v, pages, slots, k_store, v_store):
    """K and V rows into their pages' slots: float32 pages, or float16 viewed as bytes (`_kv_put`)."""
    if k.shape[0] <= SERIAL_ROWS:
        _kv_write_rows(k, v, pages, slots, k_store, v_store, 0, k.shape[0])
    else:
        _kv_write_par(k, v, pages, slots, k_store, v_store)


def attention_f32(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                  key_dim, value_dim, scale, cap, window, out, segments=(), pool=None):
    """Causal GQA attention over paged f32 K/V: out[t, head] for every token and head.

    segments: (a, b) row ranges, each of one sequence's consecutive rows (prefill), computed as
    GEMMs over that sequence's K/V (`segment_attention`, tasks on `pool`); every other row's keys
    go in pieces, a task each (`_attention_vec`). A row's result depends only on which of these it
    is, never on other sequences in the pass or on where its segment starts."""
    if key_dim % 32 != 0 or value_dim % 64 != 0:
        _attention_scalar(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                          key_dim, value_dim, scale, cap, window, out)
        return
    if not segments:
        rows = np.arange(q.shape[0], dtype=np.int64)
    else:
        in_segment = np.zeros(q.shape[0], np.bool_)
        for a, b in segments:
            in_segment[a:b] = True
            segment_attention(q, positions, page_tables[seq_index[a]], k_store, v_store, n_heads, n_kv_heads,
                              key_dim, value_dim, scale, cap, window, a, b, out, pool)
        rows = np.nonzero(~in_segment)[0]
    if len(rows):
        _attention_vec(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                       key_dim, value_dim, scale, cap, window, rows, out)


# Keys per decode attention task: a row's keys are cut in pieces at multiples of a piece size
# (absolute positions), each piece is one task for all heads, and a row's pieces merge in order.
# Pieces are KEYS_PER_TASK keys, or as many more (a multiple) as keeps a row to MAX_PIECES: the
# cuts depend on nothing but the row's own position and window, never on the other rows. Tasks of
# one head over all keys (the kernel before) read each K/V row as strided slices, one KV head's
# at a time: 226 us a layer for 1,000 keys of smollm2:135m (~7 GB/s).
KEYS_PER_TASK = 32
MAX_PIECES = 16


def _kv_width(store):  # pragma: no cover - compiled only
    """In compiled code: the values per row of a K/V store: float32 pages, or float16 pages viewed
    as bytes (Numba has no float16 arrays), two bytes a value."""


@overload(_kv_width)
def _kv_width_impl(store):
    if store.dtype == types.float32:
        return lambda store: store.shape[2]
    if store.dtype == types.uint8:
        return lambda store: store.shape[2] // 2
    return None


def _kv_fma(acc, v, flat, at):  # pragma: no cover - compiled only
    """In compiled code: acc + v * (values at..at+15 of a flat K/V store), as `vfma_vx`."""


@overload(_kv_fma)
def _kv_fma_impl(acc, v, flat, at):
    if flat.dtype == types.float32:
        return lambda acc, v, flat, at: vfma_vx(acc, v, flat, at)
    if flat.dtype == types.uint8:
        return lambda acc, v, flat, at: vfma_vh(acc, v, flat, 2 * at)
    return None


def _kv_vec(flat, at):  # pragma: no cover - compiled only
    """In compiled code: values at..at+15 of a flat K/V store (`_kv_width`'s kinds) as f32x16."""


@overload(_kv_vec)
def _kv_vec_impl(flat, at):
    if flat.dtype == types.float32:
        return lambda flat, at: vld(flat, at)
    if flat.dtype == types.uint8:
        return lambda flat, at: vld_f16(flat, 2 * at)
    return None


@_par
def _attention_vec(q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads,
                   key_dim, value_dim, scale, cap, window, rows, out):
    # A row of one piece gets its output from its task directly; a longer one's tasks leave each
    # head's max score, sum of weights and weighted sum of values, merged in order after.
    n = rows.shape[0]
    firsts, sizes, task_start = attention_plan(positions, rows, window)
    n_tasks = task_start[n]
    part_m = np.empty((n_tasks, n_heads), np.float32)
    part_l = np.empty((n_tasks, n_heads), np.float32)
    part_o = np.empty((n_tasks if n_tasks > n else 0, n_heads * value_dim), np.float32)
    for task in prange(n_tasks):
        attention_task(task, q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads, key_dim,
                       value_dim, scale, cap, rows, firsts, sizes, task_start, part_m, part_l, part_o, out)
    if part_o.shape[0] > 0:
        attention_merge(rows, task_start, part_m, part_l, part_o, out, 0, n)


@njit(cache=True)
def attention_plan(positions, rows, window):
    """A decode attention's tasks: each row's keys cut into pieces at multiples of its piece size
    (32 keys, or a larger multiple of 32 that keeps a row to MAX_PIECES pieces; so a row has at
    most MAX_PIECES + 1), by the row's own position and window only. (firsts, sizes,
    task_start): a row's first key, its piece size, its first task (task_start[n]: all tasks)."""
    n = rows.shape[0]
    firsts = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    task_start = np.empty(n + 1, np.int64)
    task_start[0] = 0
    for r in range(n):
        pos = positions[rows[r]]
        first = 0
        if window > 0 and pos - window + 1 > 0:
            first = pos - window + 1
        firsts[r] = first
        blocks = (pos - first) // KEYS_PER_TASK + 1
        sizes[r] = KEYS_PER_TASK * ((blocks + MAX_PIECES - 1) // MAX_PIECES)
        task_start[r + 1] = task_start[r] + pos // sizes[r] - first // sizes[r] + 1
    return firsts, sizes, task_start


@njit(cache=True)
def attention_task(task, q, positions, seq_index, page_tables, k_store, v_store, n_heads, n_kv_heads, key_dim,
                   value_dim, scale, cap, rows, firsts, sizes, task_start, part_m, part_l, part_o, out):
    """Task `task` of `attention_plan`: one piece of a row's keys for all heads, into out (a row
    of one piece) or into the task's row of part_m, part_l, part_o for `attention_merge`."""
    r = 0
    while task_start[r + 1] <= task:
        r += 1
    t = rows[r]
    size = sizes[r]
    start = (firsts[r] // size + task - task_start[r]) * size
    alone = task_start[r + 1] - task_start[r] == 1
    _attention_piece(q[t], page_tables[seq_index[t]], k_store, v_store, n_heads, n_heads // n_kv_heads,
                     key_dim, value_dim, scale, cap, max(start, firsts[r]), min(positions[t] + 1, start + size),
                     part_m[task], part_l[task], out[t] if alone else part_o[task], alone)


@njit(cache=True)
def attention_merge(rows, task_start, part_m, part_l, part_o, out, r0, r1):
    """Rows r0..r1-1 of more than one piece: their pieces merged in order into out."""
    for r in range(r0, r1):
        if task_start[r + 1] - task_start[r] > 1:
            _merge_pieces(part_m, part_l, part_o, task_start[r], task_start[r + 1], out[rows[r]])


@njit(fastmath=True, cache=True, error_model="numpy")  # inf/nan, never an exception
def _merge_pieces(part_m, part_l, part_o, t0, t1, orow):
    """orow = each head's softmax-weighted sum of values over pieces t0..t1-1 of its keys
    (`_attention_piece`), merged in order. Sixteen output lanes at a time, the pieces' sum kept in
    a register: element by element in scalar loops it cost as much as a 32-key piece (qwen2.5's
    14 heads x 64, two pieces: 1.9 us against 2.7 for a piece)."""
    n_heads = part_m.shape[1]
    value_dim = orow.shape[0] // n_heads
    weights = np.empty(t1 - t0, np.float32)
    for h in range(n_heads):
        m = part_m[t0, h]
        for task in range(t0, t1):
            m = max(m, part_m[task, h])
        total = np.float32(0.0)
        for task in range(t0, t1):
            w = np.float32(math.exp(part_m[task, h] - m))
            weights[task - t0] = w
            total += part_l[task, h] * w
        inv = np.float32(1.0) / total
        oo = h * value_dim
        c = 0
        while c + 16 <= value_dim:
            acc = vzero()
            for task in range(t0, t1):
                acc = vfma_s(acc, vld(part_o[task], oo + c), weights[task - t0])
            vst(orow, oo + c, vmul(acc, vsplat(inv)))
            c += 16
        for c in range(c, value_dim):  # a head width that is not a multiple of 16
            o = np.float32(0.0)
            for task in range(t0, t1):
                o += part_o[task, oo + c] * weights[task - t0]
            orow[oo + c] = o * inv


@njit(fastmath=True, cache=True, error_model="numpy")  # inf/nan, never an exception
def _attention_piece(qrow, table, k_store, v_store, n_heads, group, key_dim, value_dim, scale, cap, first, end,
                     part_m, part_l, orow, alone):
    """Every head's attention over keys first..end-1 alone (K/V pages float32, or float16 viewed as
    bytes): per head, the max score and the sum of
    weights exp(s - max) into part_m, part_l, and into orow the weighted sum of values, divided
    by that sum if `alone` (these are all the row's keys).

    The piece's keys are located once (page walk, one division a page); the stores are read
    through flat views made once, not a view per key (each takes and drops a reference on the
    store). The head dimension goes in 16-lane registers: four keys' dots of key_dim/16 FMAs
    each, then one shuffle tree for their four lane sums (`vst_hsum4`); the weighted sum keeps one
    64-wide chunk of a head's output in registers, two keys at a time."""
    page_size = k_store.shape[1]
    width_k = _kv_width(k_store)
    width_v = _kv_width(v_store)
    ks = k_store.reshape(k_store.size)
    vs = v_store.reshape(v_store.size)
    n = end - first
    n16 = (n + 15) // 16 * 16
    at = np.empty(n, np.int64)  # key j's row in the flat stores, in rows
    key = first
    while key < end:
        page = table[key // page_size]
        stop = min(end, (key // page_size + 1) * page_size)
        for s in range(key % page_size, key % page_size + stop - key):
            at[key - first + s - key % page_size] = page * page_size + s
        key = stop
    scale32 = np.float32(scale)
    cap32 = np.float32(cap)
    scores = np.empty(n16, np.float32)
    for h in range(n_heads):
        qo = h * key_dim
        ko = h // group * key_dim
        j = 0
        while j + 4 <= n:  # four keys' dots, then their lane sums in one tree
            k0, k1, k2, k3 = at[j] * width_k + ko, at[j + 1] * width_k + ko, at[j + 2] * width_k + ko, at[j + 3] * width_k + ko
            a0, a1, a2, a3 = vzero(), vzero(), vzero(), vzero()
            for c in range(0, key_dim, 16):
                qc = vld(qrow, qo + c)
                a0 = _kv_fma(a0, qc, ks, k0 + c)
                a1 = _kv_fma(a1, qc, ks, k1 + c)
                a2 = _kv_fma(a2, qc, ks, k2 + c)
                a3 = _kv_fma(a3, qc, ks, k3 + c)
            vst_hsum4(scores, j, a0, a1, a2, a3)
            j += 4
        for j in range(j, n):
            kb = at[j] * width_k + ko
            a0 = vzero()
            for c in range(0, key_dim, 16):
                a0 = _kv_fma(a0, vld(qrow, qo + c), ks, kb + c)
            scores[j] = vhsum(a0)
        if cap32 > 0.0:
            m = np.float32(-np.inf)
            for j in range(n):
                sc = cap32 * np.float32(math.tanh(scores[j] * scale32 / cap32))
                scores[j] = sc
                m = max(m, sc)
        else:  # scaled and their maximum taken 16 at a time: a scalar max is one chain, 4 cycles a key
            for i in range(n, n16):
                scores[i] = -np.inf
            sv = vsplat(scale32)
            mv = vsplat(np.float32(-np.inf))
            for i in range(0, n16, 16):
                x = vmul(vld(scores, i), sv)
                vst(scores, i, x)
                mv = vmax(mv, x)
            m = vhmax(mv)
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
        part_m[h] = m
        part_l[h] = vhsum(dv)
        inv = np.float32(1.0) / part_l[h] if alone else np.float32(1.0)
        vo = h // group * value_dim
        for c in range(0, value_dim, 64):
            # even keys into a0..a3, odd ones into b0..b3: two FMA chains per register's worth
            a0 = vzero()
            a1 = vzero()
            a2 = vzero()
            a3 = vzero()
            b0 = vzero()
            b1 = vzero()
            b2 = vzero()
            b3 = vzero()
            for j in range(0, n - 1, 2):
                va = at[j] * width_v + vo + c
                vb = at[j + 1] * width_v + vo + c
                w = scores[j]
                w2 = scores[j + 1]
                a0 = vfma_s(a0, _kv_vec(vs, va), w)
                a1 = vfma_s(a1, _kv_vec(vs, va + 16), w)
                a2 = vfma_s(a2, _kv_vec(vs, va + 32), w)
                a3 = vfma_s(a3, _kv_vec(vs, va + 48), w)
                b0 = vfma_s(b0, _kv_vec(vs, vb), w2)
                b1 = vfma_s(b1, _kv_vec(vs, vb + 16), w2)
                b2 = vfma_s(b2, _kv_vec(vs, vb + 32), w2)
                b3 = vfma_s(b3, _kv_vec(vs, vb + 48), w2)
            if n % 2:
                va = at[n - 1] * width_v + vo + c
                w = scores[n - 1]
                a0 = vfma_s(a0, _kv_vec(vs, va), w)
                a1 = vfma_s(a1, _kv_vec(vs, va + 16), w)
                a2 = vfma_s(a2, _kv_vec(vs, va + 32), w)
                a3 = vfma_s(a3, _kv_vec(vs, va + 48), w)
            oo = h * value_dim + c
            vst(orow, oo, vfma_s(vzero(), vadd(a0, b0), inv))
            vst(orow, oo + 16, vfma_s(vzero(), vadd(a1, b1), inv))
            vst(orow, oo + 32, vfma_s(vzero(), vadd(a2, b2), inv))
            vst(orow, oo + 48, vfma_s(vzero(), vadd(a3, b3), inv))


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
