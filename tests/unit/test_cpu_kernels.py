"""The cpu backend's GGML kernels agree with gguf's reference dequantization.

Ground truth is `gguf.quants.dequantize(raw, type) @ x` accumulated in float64. Weights
are random *valid* raw blocks (random bytes with every f16 scale field overwritten by a
small finite value), which exercises every bit of every quant field, plus
`gguf.quants.quantize` output for the formats gguf can quantize.

Error is NMSE = sum((a-b)^2) / sum(b^2): < 1e-6 for the float paths, < 5e-4 for the
int8-activation paths.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
K = pytest.importorskip("llamay_backends.cpu.kernels")

from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

QUANT = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
FLOAT = ["F32", "F16", "BF16"]
ALL = QUANT + FLOAT
GGUF_CAN_QUANTIZE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]

# byte offsets of the f16 scale fields inside one block of each format
F16_FIELDS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}

FLOAT_TOL = 1e-6
Q8_TOL = 5e-4


def nmse(a, b) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-300))


def make_weights(name: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random raw weights uint8[rows, row_bytes] of format `name`."""
    qt = QT[name]
    if name == "F32":
        return rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8)
    if name == "F16":
        return rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint8)
    if name == "BF16":
        return gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), qt).view(np.uint8)
    elems, nbytes = GGML_QUANT_SIZES[qt]
    nb = cols // elems
    raw = rng.integers(0, 256, size=(rows, nb, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        # small positive/negative finite scales; mins too, any sign is valid
        raw[:, :, off:off + 2] = (rng.uniform(-0.05, 0.05, (rows, nb)).astype(np.float16).view(np.uint8).reshape(rows, nb, 2))
    return raw.reshape(rows, nb * nbytes)


def reference(name: str, w: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(w, QT[name]).astype(np.float64).reshape(w.shape[0], -1)


def block_elems(name: str) -> int:
    return GGML_QUANT_SIZES[QT[name]][0]


def shapes_for(name: str):
    # odd row counts, one and several blocks per row
    be = block_elems(name)
    base = 256 if be == 256 else 32
    if be == 1:
        return [(1, 16), (3, 48), (17, 80), (5, 37), (4, 3)]  # float rows: include non-multiples of 16
    return [(1, base), (3, base * 2), (17, base * 3), (33, base * 5)]


@pytest.mark.parametrize("name", ALL)
def test_matvec_float_matches_reference(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    code = K.type_code(name)
    for rows, cols in shapes_for(name):
        w = make_weights(name, rows, cols, rng)
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.full(rows, np.nan, np.float32)
        K.matvec_float(code, w, x, out)
        ref = reference(name, w) @ x.astype(np.float64)
        assert nmse(out, ref) < FLOAT_TOL, (name, rows, cols, nmse(out, ref))


@pytest.mark.parametrize("name", ALL)
def test_matvec_default_matches_reference(name):
    # matvec picks float or int8 activations per format and CPU (uses_q8)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    code = K.type_code(name)
    tol = Q8_TOL if K.uses_q8(code) else FLOAT_TOL
    assert not (K.uses_q8(code) and name in FLOAT)
    outs, refs = [], []
    for rows, cols in shapes_for(name):
        w = make_weights(name, rows, cols, rng)
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.full(rows, np.nan, np.float32)
        K.matvec(code, w, x, out)
        outs.append(out)
        refs.append(reference(name, w) @ x.astype(np.float64))
    assert nmse(np.concatenate(outs), np.concatenate(refs)) < tol


@pytest.mark.parametrize("name", GGUF_CAN_QUANTIZE)
def test_matvec_on_gguf_quantized_weights(name):
    rng = np.random.default_rng(7)
    rows, cols = 9, 96
    wf = rng.standard_normal((rows, cols)).astype(np.float32)
    w = gguf.quants.quantize(wf, QT[name])
    x = rng.standard_normal(cols).astype(np.float32)
    out = np.empty(rows, np.float32)
    K.matvec_float(K.type_code(name), w, x, out)
    assert nmse(out, reference(name, w) @ x.astype(np.float64)) < FLOAT_TOL
    K.matvec_q8(K.type_code(name), w, x, out)
    assert nmse(out, reference(name, w) @ x.astype(np.float64)) < Q8_TOL


@pytest.mark.parametrize("name", QUANT)
def test_matvec_q8_matches_reference(name):
    # int8 x makes each output's error a random draw that is heavy-tailed when that
    # output happens to be near zero, so NMSE is taken over all 54 outputs together
    rng = np.random.default_rng(11)
    code = K.type_code(name)
    outs, refs = [], []
    for rows, cols in shapes_for(name):
        w = make_weights(name, rows, cols, rng)
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.empty(rows, np.float32)
        K.matvec_q8(code, w, x, out)
        outs.append(out)
        refs.append(reference(name, w) @ x.astype(np.float64))
    err = nmse(np.concatenate(outs), np.concatenate(refs))
    assert err < Q8_TOL, (name, err)


@pytest.mark.parametrize("name", ALL)
def test_matmul_matches_reference(name):
    rng = np.random.default_rng(3)
    code = K.type_code(name)
    rows, cols = shapes_for(name)[2]
    w = make_weights(name, rows, cols, rng)
    ref_w = reference(name, w)
    for T in (1, 2, 5):
        X = rng.standard_normal((T, cols)).astype(np.float32)
        OUT = np.full((T, rows), np.nan, np.float32)
        # a tile smaller than rows, not dividing it, exercises the tiling and the tail tile
        K.matmul(code, w, X, OUT, tile_rows=4)
        assert nmse(OUT, X.astype(np.float64) @ ref_w.T) < FLOAT_TOL, (name, T)
        OUT2 = np.empty_like(OUT)
        K.matmul_fused(code, w, X, OUT2)
        assert nmse(OUT2, X.astype(np.float64) @ ref_w.T) < FLOAT_TOL, (name, T)


@pytest.mark.parametrize("name", QUANT)
def test_matmul_q8_matches_reference(name):
    rng = np.random.default_rng(5)
    rows, cols = shapes_for(name)[2]
    w = make_weights(name, rows, cols, rng)
    X = rng.standard_normal((4, cols)).astype(np.float32)
    OUT = np.empty((4, rows), np.float32)
    K.matmul_q8(K.type_code(name), w, X, OUT)
    assert nmse(OUT, X.astype(np.float64) @ reference(name, w).T) < Q8_TOL


@pytest.mark.parametrize("name", ALL)
def test_dequantize_rows_matches_reference(name):
    rng = np.random.default_rng(13)
    rows, cols = shapes_for(name)[-1]
    w = make_weights(name, rows, cols, rng)
    ids = np.array([rows - 1, 0, rows // 2, 0], np.int64)
    out = np.empty((ids.size, cols), np.float32)
    K.dequantize_rows(K.type_code(name), w, ids, out)
    ref = reference(name, w)[ids]
    assert nmse(out, ref) < FLOAT_TOL
    # the float formats and f16-scaled products convert exactly in most lanes
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_real_model_rows_if_present():
    """Spot-check a few rows of real tensors (skipped when the model is not pulled)."""
    from pathlib import Path

    path = Path.home() / ".cache/llamay/models/qwen2.5-coder-0.5b.gguf"
    if not path.exists():
        pytest.skip("qwen2.5-coder-0.5b.gguf not present")
    reader = gguf.GGUFReader(str(path))
    seen = set()
    rng = np.random.default_rng(0)
    for t in reader.tensors:
        name = t.tensor_type.name
        if name in seen or name not in ALL or len(t.data.shape) != 2:
            continue
        seen.add(name)
        w = K.raw_rows(np.asarray(t.data)[:40], K.type_code(name))
        cols = K.row_elems(K.type_code(name), w.shape[1])
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.empty(w.shape[0], np.float32)
        ref = reference(name, w) @ x.astype(np.float64)
        K.matvec_float(K.type_code(name), w, x, out)
        assert nmse(out, ref) < FLOAT_TOL, name
        if name in QUANT:
            K.matvec_q8(K.type_code(name), w, x, out)
            assert nmse(out, ref) < Q8_TOL, name
    assert seen


def test_errors_on_bad_geometry():
    w = np.zeros((2, 20), np.uint8)  # one Q4_1 block per row -> 32 cols
    with pytest.raises(ValueError):
        K.matvec(K.Q4_1, w, np.zeros(64, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError):
        K.matvec(K.Q4_1, w, np.zeros(32, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        K.matvec(99, w, np.zeros(32, np.float32), np.zeros(2, np.float32))
    with pytest.raises(IndexError):
        K.dequantize_rows(K.Q4_1, w, np.array([2]), np.zeros((1, 32), np.float32))
    with pytest.raises(ValueError):
        K.type_code("IQ2_XXS")


def test_type_codes_are_ggml_values():
    for name, code in K.TYPE_CODE.items():
        assert code == int(QT[name])
        assert K.row_bytes(code, block_elems(name) * 3) == 3 * GGML_QUANT_SIZES[QT[name]][1]
