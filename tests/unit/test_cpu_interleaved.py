"""Weights interleaved eight rows at a time (`kernels/interleaved.py`) and their int8 kernel.

The layout must hold exactly the GGML bytes (packing round-trips, and prefill tiles rebuilt from
it dequantize to the same floats), and the kernel must compute exactly the int8 scheme of
`test_cpu_q8_scheme.py`, with each token's bits independent of the other tokens of the call.
"""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
K = pytest.importorskip("llamay_backends.cpu.kernels")

from llamay_backends.cpu.kernels import interleaved as IL  # noqa: E402
from tests.unit.test_cpu_kernels import make_weights  # noqa: E402
from tests.unit.test_cpu_q8_scheme import activations, check  # noqa: E402

FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


def columns(name: str, blocks: int) -> int:
    return blocks * (256 if name.endswith("_K") else 32)


def interleaved(code, w, X, OUT):
    K.interleaved_kernel(code, K.interleave(code, w), X.shape[1])(X, OUT)


@pytest.mark.parametrize("name", FORMATS)
def test_packing_round_trips_and_places_quants_as_documented(name):
    rng = np.random.default_rng(3)
    code = K.type_code(name)
    w = make_weights(name, 24, columns(name, 5), rng)
    packed = K.interleave(code, w)
    assert packed.shape == (3, 5 * IL.tile_bytes(code))
    assert np.array_equal(IL.unpack(code, packed), w)
    if code in IL.SUPER_LAYOUTS:
        return
    assert IL.tile_bytes(code) == 8 * IL.block_bytes(code)  # as large as the GGML rows
    lay = IL.LAYOUTS[code]
    # row 8+3's block 2: its scale, and quant 4*1+2 (low nibble, or the byte for Q8_0)
    tile = packed[1, 2 * lay.tile:3 * lay.tile]
    block = w[8 + 3, 2 * lay.block:3 * lay.block]
    assert bytes(tile[6:8]) == bytes(block[0:2])
    assert tile[lay.q + 32 * 1 + 4 * 3 + 2] == block[lay.qs + 4 * 1 + 2]


def test_only_whole_row_groups_of_the_simple_formats_interleave():
    assert K.can_interleave(K.type_code("Q5_0"), 896, 896)
    assert not K.can_interleave(K.type_code("Q5_0"), 19, 896)
    assert K.can_interleave(K.type_code("Q4_K"), 896, 4864)
    assert K.can_interleave(K.type_code("Q5_K"), 896, 4864)
    assert K.can_interleave(K.type_code("Q3_K"), 896, 4864)
    assert not K.can_interleave(K.type_code("Q2_K"), 896, 4864)
    with pytest.raises(ValueError):
        K.interleaved_kernel(K.type_code("Q4_0"), np.zeros((2, 100), np.uint8), 64)


@pytest.mark.parametrize("name", FORMATS)
def test_interleaved_int8_is_exactly_the_scheme(name):
    check(name, rows=24, blocks=3 if name.endswith("_K") else 12, tokens=3, seed=7, kernel=interleaved)


@pytest.mark.parametrize("name", FORMATS)
def test_interleaved_int8_prompts_are_exactly_the_scheme(name):
    # 9 tokens on 5 row groups: four-token blocks (on AVX-512 VNNI two groups a 512-bit step,
    # `_wide.py`, and a last group alone) and single tokens
    check(name, rows=40, blocks=2 if name.endswith("_K") else 6, tokens=9, seed=5, kernel=interleaved)


@pytest.mark.parametrize("name", FORMATS)
def test_interleaved_int8_is_batch_invariant(name):
    # 5 row groups = two full parallel tasks and a partial one; every token alone and any split
    # of the tokens get the bits they get together
    rng = np.random.default_rng(11)
    code = K.type_code(name)
    cols = columns(name, 4) // (2 if name.endswith("_K") else 1)
    w = K.interleave(code, make_weights(name, 40, cols, rng))
    X = activations(rng, 13, cols)
    kernel = K.interleaved_kernel(code, w, cols)
    together = np.full((13, 40), np.nan, np.float32)
    kernel(X, together)
    for part in (slice(0, 5), slice(5, 13), slice(12, 13)):
        sub = np.full((part.stop - part.start, 40), np.nan, np.float32)
        kernel(np.ascontiguousarray(X[part]), sub)
        assert np.array_equal(sub.view(np.uint32), together[part].view(np.uint32)), part


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_1", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0"])
def test_a_prompt_gets_decode_bits_across_chunks_and_four_token_blocks(name):
    # 70 tokens: two chunks of TOKENS_PER_CHUNK, four-token blocks and single tokens at other
    # offsets in each split; every row equals that token computed alone
    from llamay_backends.cpu.kernels._interleaved import TOKENS_PER_CHUNK

    rng = np.random.default_rng(3)
    code = K.type_code(name)
    cols = columns(name, 2)
    w = K.interleave(code, make_weights(name, 16, cols, rng))
    X = activations(rng, 70, cols)
    kernel = K.interleaved_kernel(code, w, cols)
    together = np.full((70, 16), np.nan, np.float32)
    kernel(X, together)
    assert 70 > TOKENS_PER_CHUNK
    for part in (slice(0, 1), slice(1, 66), slice(66, 70), slice(63, 70)):
        sub = np.full((part.stop - part.start, 16), np.nan, np.float32)
        kernel(np.ascontiguousarray(X[part]), sub)
        assert np.array_equal(sub.view(np.uint32), together[part].view(np.uint32)), part


@pytest.mark.parametrize("name", FORMATS)
def test_prefill_from_the_interleaved_layout_matches_the_ggml_one(name):
    # tiles rebuilt from the packed rows dequantize to the very floats of the GGML rows, so the
    # prefill GEMM sees the same weights; 72 rows in tiles of 24 (and a ragged last tile)
    rng = np.random.default_rng(5)
    code = K.type_code(name)
    cols = columns(name, 3)
    w = make_weights(name, 72, cols, rng)
    packed = K.interleave(code, w)
    want = np.empty((72, cols), np.float32)
    K.dequantize_range(code, w, 0, 72, want)
    from llamay_backends.cpu.kernels._interleaved import dequantize_tile

    got = np.full((24, cols), np.nan, np.float32)
    dequantize_tile(code, packed, 48, 72, got)
    assert np.array_equal(got.view(np.uint32), want[48:72].view(np.uint32))
    X = rng.standard_normal((40, cols)).astype(np.float32)
    a = np.empty((40, 72), np.float32)
    b = np.empty((40, 72), np.float32)
    K.matmul(code, w, X, a, tile_rows=24)
    K.matmul(code, packed, X, b, tile_rows=28, interleaved=True)  # rounded to whole row groups
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * float(np.abs(a).max()))


try:
    from hypothesis import example, given, settings
    from hypothesis import strategies as st
except ImportError:  # hypothesis is a test extra; the seeded tests above still run
    pass
else:
    @settings(max_examples=20, deadline=None)
    @given(st.sampled_from(FORMATS), st.integers(1, 4), st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31))
    # a block of one-signed activations: the unsigned quants' part and the offsets' part are each
    # ~60x the product they cancel to (`rounding_scale` in test_cpu_q8_scheme.py)
    @example("Q4_0", 1, 3, 4, 370)
    def test_interleaved_int8_is_the_scheme_for_any_shape(name, groups, blocks, tokens, seed):
        check(name, 8 * groups, blocks, tokens, seed, kernel=interleaved)


def read_only(packed: np.ndarray) -> np.ndarray:
    # as the plan holds its weights (`CpuWeight`): one build of the kernel serves both calls
    packed.flags.writeable = False
    return packed


@pytest.mark.parametrize("n_weights", [2, 3])
@pytest.mark.parametrize("name", FORMATS)
def test_weights_sharing_their_rows_in_one_loop_get_the_bits_of_separate_calls(name, n_weights):
    """`interleaved_multi` (q, k, v in one parallel loop) against each weight's own call."""
    rng = np.random.default_rng(11)
    code = K.type_code(name)
    cols = columns(name, 2 if name.endswith("_K") else 6)
    calls = [K.decode_call(code, w, read_only(K.interleave(code, w)), cols, int8=True)
             for w in (make_weights(name, rows, cols, rng) for rows in (40, 16, 24)[:n_weights])]
    for tokens in (1, 5, 70):  # one, a four-token block and a tail, past a 64-token chunk
        X = activations(rng, tokens, cols)
        alone = [np.empty((tokens, c.rows), np.float32) for c in calls]
        for c, out in zip(calls, alone):
            c(X, out)
        together = [np.full((tokens, c.rows), np.nan, np.float32) for c in calls]
        K.interleaved_multi(calls, X, together)
        for a, b in zip(alone, together):
            np.testing.assert_array_equal(a, b)


def test_any_runs_of_tasks_give_each_row_the_bits_of_one_run_over_all():
    """`run_tasks`: the runs a team or a parallel loop cuts the numbering into (across weights
    and 64-token chunks) each compute exactly their own tasks' rows, with the same bits."""
    from llamay_backends.cpu.kernels import _interleaved as KI

    rng = np.random.default_rng(13)
    code = K.type_code("Q4_0")
    lay = IL.LAYOUTS[code]
    ws = [read_only(K.interleave(code, make_weights("Q4_0", rows, 64, rng))) for rows in (40, 16, 24)]
    XQ, XA = KI.quantize_rows(activations(rng, 70, 64))
    n_tasks = KI.count_tasks(*ws, 70)
    assert n_tasks == 2 * (3 + 1 + 2)  # two chunks; 5, 2 and 3 row groups, two a task

    def run(cuts):
        outs = [np.full((70, 8 * w.shape[0]), np.nan, np.float32) for w in ws]
        for first, end in zip(cuts[:-1], cuts[1:]):
            KI.run_tasks(code, first, end - first, *ws, XQ, XA, *outs, lay.tile, lay.q, lay.m, lay.hb)
        return outs

    whole = run([0, n_tasks])
    assert not any(np.isnan(o).any() for o in whole)
    for _ in range(20):
        cuts = [0, *sorted(rng.choice(np.arange(1, n_tasks), 4, replace=False)), n_tasks]
        for a, b in zip(whole, run(cuts)):
            np.testing.assert_array_equal(a, b)
    # tasks 3..6 alone: chunk 0's one task of weight 1 and two of weight 2, then chunk 1's first
    # of weight 0 (its groups 0 and 1: rows 0-15 of tokens 64-69)
    part = run([3, 7])
    assert not np.isnan(part[0][64:, :16]).any()
    assert np.isnan(part[0][:64]).all() and np.isnan(part[0][:, 16:]).all()
    for out in part[1:]:
        assert not np.isnan(out[:64]).any() and np.isnan(out[64:]).all()


def test_the_one_token_kernels_hint_every_line_of_a_tile():
    """`_hint_tile` hints `hint_lines` lines 64 bytes apart from each tile's start: tile after
    tile they must reach the next tile's start, or some line is read unhinted."""
    from llamay_backends.cpu.kernels._interleaved import hint_lines

    for code, layout in IL.LAYOUTS.items():
        lines = hint_lines(code)
        assert 64 * lines >= layout.tile, (code, layout.tile, lines)
        covered = set()
        for start in range(0, 40 * layout.tile, layout.tile):
            covered.update((start + 64 * j) // 64 for j in range(lines))
        assert covered >= set(range((40 * layout.tile) // 64)), code
