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


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # hypothesis is a test extra; the seeded tests above still run
    given = None

if given is not None:

    @pytest.mark.parametrize("name", ALL)
    @settings(max_examples=12, deadline=None, derandomize=True)
    @given(rows=st.integers(1, 40), blocks=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
    def test_matvec_any_shape(name, rows, blocks, seed):
        rng = np.random.default_rng(seed)
        code = K.type_code(name)
        cols = blocks * max(block_elems(name), 16) + (rng.integers(0, 16) if name in FLOAT else 0)
        w = make_weights(name, rows, cols, rng)
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.empty(rows, np.float32)
        K.matvec_float(code, w, x, out)
        assert nmse(out, reference(name, w) @ x.astype(np.float64)) < FLOAT_TOL


@pytest.mark.parametrize("name", ["Q4_1", "Q5_0", "Q6_K", "F16"])
def test_serial_building_blocks(name):
    # what a whole-layer Numba kernel calls per task: one prepared x, row ranges
    rng = np.random.default_rng(17)
    code = K.type_code(name)
    rows, cols = shapes_for(name)[-1]
    w = make_weights(name, rows, cols, rng)
    x = rng.standard_normal(cols).astype(np.float32)
    ref = reference(name, w) @ x.astype(np.float64)
    out = np.full(rows, np.nan, np.float32)
    xa = K.prepare_x(x)
    K.dot_rows(code, w, x, xa, out, 0, 5)
    K.dot_rows(code, w, x, xa, out, 5, rows)
    assert nmse(out, ref) < FLOAT_TOL
    if name in QUANT:
        out[:] = np.nan
        xq, xa = K.prepare_x_q8(x)
        K.qdot_rows(code, w, xq, xa, out, 0, rows)
        assert nmse(out, ref) < Q8_TOL


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
    for T in (1, 2, K.SMALL_T + 2):
        X = rng.standard_normal((T, cols)).astype(np.float32)
        OUT = np.full((T, rows), np.nan, np.float32)
        # a tile smaller than rows, not dividing it, exercises the tiling and the tail tile
        K.matmul(code, w, X, OUT, tile_rows=4)
        tol = Q8_TOL if T <= K.SMALL_T and K.uses_q8(code) else FLOAT_TOL
        assert nmse(OUT, X.astype(np.float64) @ ref_w.T) < tol, (name, T)
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


def _gguf_tensors(path):
    """{name: (type name, rows, uint8[rows, row_bytes] memmap)} for the 2-D tensors.

    A minimal GGUF tensor-table reader: gguf.GGUFReader decodes every metadata array
    (150k-token vocabularies) in Python, which takes seconds this test does not need.
    """
    import struct

    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]  # noqa: E731
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip(vtype):
        if vtype == 8:
            f.seek(rd("Q"), 1)
        elif vtype == 9:
            etype, n = rd("I"), rd("Q")
            if etype == 8:
                for _ in range(n):
                    f.seek(rd("Q"), 1)
            else:
                f.seek(n * struct.calcsize(scalar[etype]), 1)
        else:
            return rd(scalar[vtype])

    assert f.read(4) == b"GGUF"
    rd("I")
    n_tensors, n_kv = rd("Q"), rd("Q")
    alignment = 32
    for _ in range(n_kv):
        key = f.read(rd("Q")).decode()
        value = skip(rd("I"))
        if key == "general.alignment":
            alignment = value
    infos = []
    for _ in range(n_tensors):
        name = f.read(rd("Q")).decode()
        dims = [rd("Q") for _ in range(rd("I"))]
        infos.append((name, dims, rd("I"), rd("Q")))
    start = -(-f.tell() // alignment) * alignment
    out = {}
    for name, dims, tcode, offset in infos:
        try:
            qt = QT(tcode)
        except ValueError:  # a format newer than this gguf package
            continue
        if len(dims) != 2 or qt.name not in ALL:
            continue
        elems, nbytes = GGML_QUANT_SIZES[qt]
        row_bytes = dims[0] // elems * nbytes
        data = np.memmap(path, np.uint8, "r", start + offset, (dims[1], row_bytes))
        out[name] = (qt.name, data)
    return out


@pytest.mark.model
def test_real_model_rows_if_present():
    """Spot-check rows of real tensors of every format the models use (skipped without them)."""
    from pathlib import Path

    models = Path.home() / ".cache/llamay/models"
    paths = [models / "qwen2.5-coder-0.5b.gguf", models / "smollm2-135m.gguf"]
    if not any(p.exists() for p in paths):
        pytest.skip("no model pulled")
    seen = set()
    rng = np.random.default_rng(0)
    for path in paths:
        if not path.exists():
            continue
        for name, data in _gguf_tensors(path).values():
            if name in seen:
                continue
            seen.add(name)
            code = K.type_code(name)
            w = np.ascontiguousarray(data[:40])
            cols = K.row_elems(code, w.shape[1])
            x = rng.standard_normal(cols).astype(np.float32)
            out = np.empty(w.shape[0], np.float32)
            ref = reference(name, w) @ x.astype(np.float64)
            K.matvec_float(code, w, x, out)
            assert nmse(out, ref) < FLOAT_TOL, name
            if name in QUANT:
                K.matvec_q8(code, w, x, out)
                assert nmse(out, ref) < Q8_TOL, name
    assert "Q8_0" in seen, seen


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


def _grouped_case(name, rows, blocks, tokens, seed):
    rng = np.random.default_rng(seed)
    code = K.type_code(name)
    cols = blocks * max(block_elems(name), 32) + (rng.integers(0, 16) if name in FLOAT else 0)
    w = np.ascontiguousarray(make_weights(name, rows, cols, rng))
    X = rng.standard_normal((tokens, cols)).astype(np.float32)
    together = np.full((tokens, rows), np.nan, np.float32)
    K.matmul_grouped(code, w, X, together)
    assert nmse(together, X.astype(np.float64) @ reference(name, w).T) < FLOAT_TOL
    # every token alone, and the tokens split at an arbitrary point, give the same bits
    cut = int(rng.integers(0, tokens + 1))
    for part in (slice(0, cut), slice(cut, tokens)):
        if part.start == part.stop:
            continue
        sub = np.full((part.stop - part.start, rows), np.nan, np.float32)
        K.matmul_grouped(code, w, np.ascontiguousarray(X[part]), sub)
        assert np.array_equal(sub.view(np.uint32), together[part].view(np.uint32))
    for t in range(tokens):
        alone = np.full((1, rows), np.nan, np.float32)
        K.matmul_grouped(code, w, np.ascontiguousarray(X[t:t + 1]), alone)
        assert np.array_equal(alone.view(np.uint32), together[t:t + 1].view(np.uint32))


@pytest.mark.parametrize("name", ALL)
def test_matmul_grouped_is_exact_and_batch_invariant(name):
    # 13 tokens = groups of 8, 4 and 1; 35 rows = two full 16-row tasks and a partial one
    _grouped_case(name, 35, 3, 13, zlib.crc32(name.encode()) + 29)


if given is not None:

    @pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K", "F16"])
    @settings(max_examples=8, deadline=None, derandomize=True)
    @given(rows=st.integers(1, 40), blocks=st.integers(1, 3), tokens=st.integers(1, 19),
           seed=st.integers(0, 2**32 - 1))
    def test_matmul_grouped_any_shape(name, rows, blocks, tokens, seed):
        _grouped_case(name, rows, blocks, tokens, seed)


def test_generated_group_loops_are_current():
    # _grouped_rows.py and _grouped_q8_rows.py are written by gen_grouped_rows.py; an edit to
    # either alone is a mistake
    from llamay_backends.cpu.kernels import gen_grouped_rows

    assert gen_grouped_rows.TARGET.read_text() == gen_grouped_rows.source()
    assert gen_grouped_rows.TARGET_Q8.read_text() == gen_grouped_rows.source_q8()
