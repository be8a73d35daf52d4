"""The cpu backend's prefill attention agrees with reference and with the per-row kernel.

Two sequences share a pass over shuffled KV pages: one prefills a few hundred rows (GEMM tasks of
64 query rows), the other a handful (one task per token and head); GQA, a sliding window and a softcap each change which keys a segment's
queries see.
"""
from __future__ import annotations

import numpy as np
import pytest

ops = pytest.importorskip("llamay_backends.cpu.ops")
from llamay_backends.reference.ops import attention_one_sequence  # noqa: E402

PAGE = 16


def _case(rng, lengths, starts, n_heads, n_kv_heads, dim):
    """Rows: sequence s prefills positions starts[s]..lengths[s]-1 over its own shuffled pages."""
    pages_per_seq = [-(-n // PAGE) for n in lengths]
    order = rng.permutation(sum(pages_per_seq))
    tables = np.zeros((len(lengths), max(pages_per_seq)), np.int64)
    k_store = np.zeros((len(order), PAGE, n_kv_heads * dim), np.float32)
    v_store = np.zeros_like(k_store)
    kv, rows, at = [], [], 0
    for s, n in enumerate(lengths):
        tables[s, :pages_per_seq[s]] = order[at:at + pages_per_seq[s]]
        at += pages_per_seq[s]
        k = rng.standard_normal((n, n_kv_heads * dim)).astype(np.float32)
        v = rng.standard_normal((n, n_kv_heads * dim)).astype(np.float32)
        for p in range(n):
            k_store[tables[s, p // PAGE], p % PAGE] = k[p]
            v_store[tables[s, p // PAGE], p % PAGE] = v[p]
        kv.append((k, v))
        rows += [(s, p) for p in range(starts[s], n)]
    seq_index = np.array([s for s, _ in rows], np.int64)
    positions = np.array([p for _, p in rows], np.int64)
    q = rng.standard_normal((len(rows), n_heads * dim)).astype(np.float32)
    return q, positions, seq_index, tables, k_store, v_store, kv


@pytest.mark.parametrize("n_heads,n_kv_heads,dim,cap,window", [(9, 3, 64, 0.0, 0), (4, 1, 128, 30.0, 0),
                                                               (6, 2, 64, 0.0, 100)])
@pytest.mark.parametrize("block", [None, 32])
def test_segments_match_reference_and_per_row_kernel(n_heads, n_kv_heads, dim, cap, window, block, monkeypatch):
    if block:
        from llamay_backends.cpu import segment_attention as module

        monkeypatch.setattr(module, "BLOCK", block)
    rng = np.random.default_rng(n_heads * 100 + dim)
    # sequence 0: 309 rows after a 20-token cached prefix (GEMM tasks over blocks of BLOCK keys,
    # or of 32: many blocks, some skipped by the window); sequence 1: 6 rows after 40 cached
    # tokens (per-row tasks)
    q, positions, seq_index, tables, ks, vs, kv = _case(rng, [329, 46], [20, 40], n_heads, n_kv_heads, dim)
    scale = dim ** -0.5
    args = (n_heads, n_kv_heads, dim, dim, scale, cap, window)
    segmented = np.full((len(q), n_heads * dim), np.nan, np.float32)
    ops.attention_f32(q, positions, seq_index, tables, ks, vs, *args, segmented, [(0, 309)])  # the segment as GEMMs
    per_row = np.full_like(segmented, np.nan)
    ops.attention_f32(q, positions, seq_index, tables, ks, vs, *args, per_row)
    for s, (k, v) in enumerate(kv):
        rows = seq_index == s
        want = attention_one_sequence(q[rows], positions[rows], k, v, n_heads, n_kv_heads, dim, dim, scale, cap,
                                      window)
        np.testing.assert_allclose(segmented[rows], want, rtol=0, atol=2e-5)
    np.testing.assert_allclose(segmented, per_row, rtol=0, atol=2e-6)
    # rows outside the segments take the per-row kernel: the same bits either way
    np.testing.assert_array_equal(segmented[309:], per_row[309:])


@pytest.mark.parametrize("window", [0, 1, 5, 16, 37, 200])
@pytest.mark.parametrize("start", [0, 3, 16, 150])
@pytest.mark.parametrize("sizes", [None, (3, 32)])
def test_a_segment_sees_exactly_its_window_from_any_start(window, start, sizes, monkeypatch):
    # windows shorter than a page, a page and the segment; segments starting mid-page; tasks of
    # 64 rows and blocks of 256 keys, or of 3 rows and 32 keys (many tasks and blocks, the last of
    # each partial): each row's keys are the last `window` up to its own position, on a thread
    # pool as the plan runs it
    from concurrent.futures import ThreadPoolExecutor

    from llamay_backends.cpu import segment_attention as module
    from llamay_backends.cpu.segment_attention import segment_attention

    if sizes:
        monkeypatch.setattr(module, "QUERY_ROWS", sizes[0])
        monkeypatch.setattr(module, "BLOCK", sizes[1])
    rng = np.random.default_rng(window * 1000 + start)
    n_heads, n_kv_heads, dim = 4, 2, 32
    q, positions, _, tables, ks, vs, kv = _case(rng, [start + 140], [start], n_heads, n_kv_heads, dim)
    out = np.full((len(q), n_heads * dim), np.nan, np.float32)
    with ThreadPoolExecutor(2) as pool:
        segment_attention(q, positions, tables[0], ks, vs, n_heads, n_kv_heads, dim, dim, dim ** -0.5, 0.0,
                          window, 0, len(q), out, pool)
    want = attention_one_sequence(q, positions, *kv[0], n_heads, n_kv_heads, dim, dim, dim ** -0.5, 0.0, window)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)


@pytest.mark.parametrize("cap,window,block", [(0.0, 0, None), (30.0, 0, None), (0.0, 300, 64)])
def test_a_row_gets_the_same_bits_whatever_segment_it_comes_in(cap, window, block, monkeypatch):
    # a forked context prefills its question as its own segment; the same text at once puts those
    # rows in the middle of a longer one: fork and fresh prefill must generate the same tokens.
    # With a window, tasks skip the blocks before their rows' windows, a different number per cut.
    from llamay_backends.cpu import segment_attention as module

    if block:
        monkeypatch.setattr(module, "BLOCK", block)
    rng = np.random.default_rng(3)
    n_heads, n_kv_heads, dim = 6, 2, 64
    q, positions, _, tables, ks, vs, _ = _case(rng, [700], [0], n_heads, n_kv_heads, dim)
    args = (n_heads, n_kv_heads, dim, dim, dim ** -0.5, cap, window)
    whole = np.full((len(q), n_heads * dim), np.nan, np.float32)
    module.segment_attention(q, positions, tables[0], ks, vs, *args, 0, len(q), whole)
    for cuts in ([0, 300, 700], [0, 17, 530, 700], [0, 611, 650, 700]):
        parts = np.full_like(whole, np.nan)
        for a, b in zip(cuts, cuts[1:]):
            module.segment_attention(q, positions, tables[0], ks, vs, *args, a, b, parts)
        assert np.array_equal(parts.view(np.uint32), whole.view(np.uint32)), cuts


@pytest.mark.parametrize("n_heads,n_kv_heads,dim,cap,window", [(9, 3, 64, 0.0, 0), (4, 1, 256, 50.0, 0),
                                                               (6, 2, 64, 0.0, 300), (2, 2, 128, 0.0, 0)])
def test_decode_rows_over_many_pieces_match_reference_and_keep_their_bits_alone(n_heads, n_kv_heads, dim, cap, window):
    # decode rows of three sequences at 1, 129 (a second piece of keys by one key) and ~700
    # positions: each row's keys are cut in pieces at multiples of ops.KEYS_PER_TASK and merged;
    # a row's bits must not depend on the other rows of the pass (batched decode, speculation)
    rng = np.random.default_rng(n_heads * 10 + dim)
    q, positions, seq_index, tables, ks, vs, kv = _case(rng, [1, ops.KEYS_PER_TASK + 1, 700], [0, 123, 690],
                                                        n_heads, n_kv_heads, dim)
    scale = dim ** -0.5
    together = np.full((len(q), n_heads * dim), np.nan, np.float32)
    ops._attention_vec(q, positions, seq_index, tables, ks, vs, n_heads, n_kv_heads, dim, dim, scale, cap, window,
                       np.arange(len(q), dtype=np.int64), together)
    for s, (k, v) in enumerate(kv):
        rows = seq_index == s
        want = attention_one_sequence(q[rows], positions[rows], k, v, n_heads, n_kv_heads, dim, dim, scale, cap,
                                      window)
        np.testing.assert_allclose(together[rows], want, rtol=0, atol=2e-5)
    for r in (0, 3, len(q) - 1):
        alone = np.full_like(together, np.nan)
        ops._attention_vec(q, positions, seq_index, tables, ks, vs, n_heads, n_kv_heads, dim, dim, scale, cap,
                           window, np.array([r], np.int64), alone)
        assert np.array_equal(alone[r].view(np.uint32), together[r].view(np.uint32)), r
        assert np.isnan(alone[np.arange(len(q)) != r]).all()  # nothing but its own row written


@pytest.mark.parametrize("n_heads,n_kv_heads,dim,window", [(9, 3, 64, 0), (4, 1, 256, 100)])
def test_decode_rows_read_f16_pages_in_place_as_their_f32_values(n_heads, n_kv_heads, dim, window):
    # f16 KV pages viewed as bytes: the same attention as f32 pages holding the same values
    rng = np.random.default_rng(dim + window)
    q, positions, seq_index, tables, ks, vs, _ = _case(rng, [300, 45], [290, 40], n_heads, n_kv_heads, dim)
    ks16, vs16 = ks.astype(np.float16), vs.astype(np.float16)
    args = (n_heads, n_kv_heads, dim, dim, dim ** -0.5, 0.0, window, np.arange(len(q), dtype=np.int64))
    want = np.full((len(q), n_heads * dim), np.nan, np.float32)
    ops._attention_vec(q, positions, seq_index, tables, ks16.astype(np.float32), vs16.astype(np.float32), *args, want)
    got = np.full_like(want, np.nan)
    ops._attention_vec(q, positions, seq_index, tables, ks16.view(np.uint8), vs16.view(np.uint8), *args, got)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_four_lane_sums_at_once_are_each_vectors_sum():
    # attention scores four keys at a time: one shuffle tree for four vectors (`vst_hsum4`)
    from numba import njit

    from llamay_backends.cpu.kernels._simd import vld, vst_hsum4

    @njit
    def sums(x, out, oo):
        vst_hsum4(out, oo, vld(x, 0), vld(x, 16), vld(x, 32), vld(x, 48))

    rng = np.random.default_rng(4)
    for scale in (1.0, 1e-3, 1e4):
        x = (rng.standard_normal(64) * scale).astype(np.float32)
        out = np.full(7, np.nan, np.float32)
        sums(x, out, 2)
        np.testing.assert_allclose(out[2:6], x.reshape(4, 16).astype(np.float64).sum(axis=1), rtol=1e-5,
                                   atol=1e-6 * scale)
        assert np.isnan(out[[0, 1, 6]]).all()  # four floats written, no more


@pytest.mark.parametrize("value_dim", [64, 24])
def test_merging_pieces_weights_each_by_its_share_of_the_softmax(value_dim):
    # pieces of one row's keys (max score, sum of weights, unnormalized values) merge in order;
    # a head width that is not a multiple of 16 takes the scalar tail
    rng = np.random.default_rng(value_dim)
    n_pieces, n_heads = 5, 3
    part_m = rng.standard_normal((n_pieces, n_heads)).astype(np.float32)
    part_l = rng.uniform(0.5, 4.0, (n_pieces, n_heads)).astype(np.float32)
    part_o = rng.standard_normal((n_pieces, n_heads * value_dim)).astype(np.float32)
    out = np.full((1, n_heads * value_dim), np.nan, np.float32)
    task_start = np.array([0, n_pieces], np.int64)
    ops.attention_merge(np.zeros(1, np.int64), task_start, part_m, part_l, part_o, out, 0, 1)
    w = np.exp(part_m - part_m.max(axis=0))  # [piece, head]
    o = part_o.reshape(n_pieces, n_heads, value_dim)
    want = (o * w[:, :, None]).sum(axis=0) / (part_l * w).sum(axis=0)[:, None]
    np.testing.assert_allclose(out[0], want.reshape(-1), rtol=2e-6, atol=2e-6)
