"""The cpu int8-activation kernels compute exactly their scheme, format by format.

The scheme (llama.cpp's q8 activations, and the conformance's NumPy `test-int8` backend):
each row of x is cut into blocks of 32, d = max|x| / 127 per block, xq = rint(x * (1/d)) in
float32, and the product is dequantize(W) @ (d * xq). Here that is emulated in NumPy and
float64 from gguf's dequantization, and the kernels must agree to float32 rounding, not
merely to the scheme's own error: a lossy step (a minimum taken against the float sum of x,
a scale rounded differently, one row quantized with another's scale) shows up as a
difference of 1e-4..1e-2 of the output's magnitude, far above the 1e-6 allowed.
"""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
K = pytest.importorskip("llamay_backends.cpu.kernels")

from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

from llamay_backends.cpu.kernels._rows import XD, XI32  # noqa: E402
from tests.unit.test_cpu_kernels import QUANT, make_weights  # noqa: E402

# float32 accumulation over at most a few hundred block products, relative to `rounding_scale`
ROUNDING = 1e-6

# Bytes of a block that hold its scales, minima and f16 fields (the rest are quants). With the
# quants zeroed, a block dequantizes to its offset: Q4_0's -8 d, Q4_1's minimum, Q6_K's -32 d sc.
SCALE_BYTES = {
    "Q4_0": slice(0, 2), "Q4_1": slice(0, 4), "Q5_0": slice(0, 2), "Q5_1": slice(0, 4), "Q8_0": slice(0, 2),
    "Q2_K": (slice(0, 16), slice(80, 84)), "Q3_K": slice(96, 110), "Q4_K": slice(0, 16), "Q5_K": slice(0, 16),
    "Q6_K": slice(192, 210),
}


def quantize_scheme(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xq int8 as float64 [rows, n], d float32 [rows, n // 32]): the scheme, row by row."""
    blocks = x.reshape(x.shape[0], -1, 32)
    d = (np.abs(blocks).max(axis=2) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0).astype(np.float32)
    xq = np.clip(np.rint(blocks * inv[:, :, None]), -127, 127)
    return xq.reshape(x.shape).astype(np.float64), d


def dequantize(name: str, w: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(w, QT[name]).astype(np.float64).reshape(w.shape[0], -1)


def block_offsets(name: str, w: np.ndarray) -> np.ndarray:
    """Each weight's offset: what its block dequantizes to with every quant set to zero."""
    nbytes = GGML_QUANT_SIZES[QT[name]][1]
    blocks = w.reshape(w.shape[0], -1, nbytes)
    kept = np.zeros_like(blocks)
    spans = SCALE_BYTES[name]
    for span in spans if isinstance(spans, tuple) else (spans,):
        kept[:, :, span] = blocks[:, :, span]
    return dequantize(name, kept.reshape(w.shape))


def rounding_scale(name: str, w: np.ndarray, wf: np.ndarray, xhat: np.ndarray) -> np.ndarray:
    """The magnitude float32 rounding is relative to, [tokens, rows].

    At least sum |W| |xhat|. The kernels multiply x by a block's quants read as unsigned and add
    the block's offset times x's sum apart (as llama.cpp does with minima): two exact integer sums,
    each scaled and rounded on its own. Where a block's activations lean to one sign both parts
    outgrow the product they cancel to, so the bound also takes them, per 16-weight run.
    `wf`: dequantize(name, w)."""
    off = block_offsets(name, w)

    def run_sums(weights: np.ndarray) -> np.ndarray:  # |xhat . weights| per 16-element run, [t, r, run]
        return np.abs(np.einsum("tki,rki->trk", xhat.reshape(len(xhat), -1, 16), weights.reshape(len(weights), -1, 16)))

    parts = (run_sums(wf - off) + run_sums(off)).sum(axis=2)
    return np.maximum(np.abs(xhat) @ np.abs(wf).T, parts)


def scheme_product(name: str, w: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dequantize(W) @ xhat for each row of x, the scale of float rounding: `rounding_scale`)."""
    wf = dequantize(name, w)
    xq, d = quantize_scheme(x)
    xhat = (xq.reshape(x.shape[0], -1, 32) * d[:, :, None].astype(np.float64)).reshape(x.shape)
    return xhat @ wf.T, rounding_scale(name, w, wf, xhat)


def activations(rng: np.random.Generator, tokens: int, cols: int) -> np.ndarray:
    """Rows shaped like a model's: mostly small, a few outlier channels, an all-zero block."""
    x = rng.standard_normal((tokens, cols)) * rng.choice([0.02, 0.3, 1.0], size=(1, cols))
    x[:, rng.integers(0, cols, 3)] *= 40.0
    x[0, :32] = 0.0  # d = 0: the block contributes nothing
    return x.astype(np.float32)


def per_row(code, w, X, OUT):
    K.matmul_q8(code, w, X, OUT)  # the per-row int8 kernels (`matvec`'s and small-T `matmul`'s)


def grouped(code, w, X, OUT):
    K.matmul_grouped(code, w, X, OUT, int8=True)  # the cpu plan's int8 decode kernel


def check(name: str, rows: int, blocks: int, tokens: int, seed: int, kernel=per_row) -> None:
    rng = np.random.default_rng(seed)
    cols = blocks * GGML_QUANT_SIZES[QT[name]][0]
    w = make_weights(name, rows, cols, rng)
    X = activations(rng, tokens, cols)
    OUT = np.full((tokens, rows), np.nan, np.float32)
    kernel(K.type_code(name), w, X, OUT)
    want, scale = scheme_product(name, w, X)
    err = np.abs(OUT - want) / np.maximum(scale, 1e-30)
    assert err.max() < ROUNDING, (name, float(err.max()), np.unravel_index(int(err.argmax()), err.shape))


@pytest.mark.parametrize("kernel", [per_row, grouped])
@pytest.mark.parametrize("name", QUANT)
def test_int8_kernel_is_exactly_the_scheme(name, kernel):
    # three rows of x at once: each must use its own scales (rows 0..2 differ in range)
    check(name, rows=19, blocks=3 if GGML_QUANT_SIZES[QT[name]][0] == 256 else 12, tokens=3, seed=7, kernel=kernel)


@pytest.mark.parametrize("name", QUANT)
def test_grouped_int8_is_batch_invariant(name):
    # 13 tokens = passes of 8, 4 and 1; 35 rows = two full 16-row tasks and a partial one. Every
    # token alone, and the tokens split at any point, get the bits they get together.
    rng = np.random.default_rng(11)
    code = K.type_code(name)
    cols = 2 * max(GGML_QUANT_SIZES[QT[name]][0], 64)
    w = make_weights(name, 35, cols, rng)
    X = activations(rng, 13, cols)
    together = np.full((13, 35), np.nan, np.float32)
    grouped(code, w, X, together)
    for part in (slice(0, 5), slice(5, 13), slice(0, 9), slice(9, 13)):
        sub = np.full((part.stop - part.start, 35), np.nan, np.float32)
        grouped(code, w, np.ascontiguousarray(X[part]), sub)
        assert np.array_equal(sub.view(np.uint32), together[part].view(np.uint32)), part
    for t in range(13):
        alone = np.full((1, 35), np.nan, np.float32)
        grouped(code, w, np.ascontiguousarray(X[t:t + 1]), alone)
        assert np.array_equal(alone.view(np.uint32), together[t:t + 1].view(np.uint32)), t


def test_quantization_is_exactly_the_scheme():
    # the scales and quants themselves, bit for bit (a reciprocal of 127 in place of the
    # division moves quants that sit near a rounding tie)
    rng = np.random.default_rng(1)
    x = activations(rng, 1, 4096)[0]
    xq, xa = K.prepare_x_q8(x)
    want_q, want_d = quantize_scheme(x[None])
    assert np.array_equal(xa[XD][:128], want_d[0])
    assert np.array_equal(xq.astype(np.float64), want_q[0])
    # -128 times the integer block sums: what Q8_0's VNNI path adds to its q + 128 dots, as int32
    assert np.array_equal(xa[XI32][:128].view(np.int32), -128 * want_q[0].reshape(-1, 32).sum(axis=1))


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # hypothesis is a test extra; the seeded tests above still run
    pass
else:
    _finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.one_of(_finite_f32, st.sampled_from([0.0, -0.0, 1e-45, -1e-45, 1e-38, -3.4e38, 3.4e38])),
                    min_size=64, max_size=64))
    def test_a_block_scale_is_its_largest_magnitude_over_127(values):
        # max|x| is taken on the sign-cleared bits (`_simd.q8_block`): the same float as the
        # float maximum for every finite x, signed zeros and subnormals included
        x = np.array(values, np.float32)
        _, xa = K.prepare_x_q8(x)
        want = (np.abs(x.reshape(-1, 32)).max(axis=1) / np.float32(127)).astype(np.float32)
        assert np.array_equal(xa[XD][:2].view(np.uint32), want.view(np.uint32))

    @settings(max_examples=25, deadline=None)
    @given(st.sampled_from(QUANT), st.integers(1, 9), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31))
    def test_int8_kernel_is_the_scheme_for_any_shape(name, rows, blocks, tokens, seed):
        check(name, rows, blocks, tokens, seed)
        check(name, rows, blocks, tokens, seed, kernel=grouped)
