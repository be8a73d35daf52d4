"""The webgpu backend against reference, op by op, through small graphs on random inputs.

Skipped when wgpu is missing or there is no adapter. Shapes are small: CI runs this on lavapipe.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES

from llamay_core.backend_api import Batch, KvSpec
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.reference.backend import ReferenceBackend
from llamay_backends.webgpu.formats import LAYOUTS, pack_rows

WEIGHT_TYPES = ["F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# Where each type keeps its f16 scales (byte offsets in a block): set to sane values in random blocks.
HALF_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
               "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


@pytest.fixture(scope="module")
def webgpu():
    from llamay_backends.webgpu.backend import WebGPUBackend

    backend = WebGPUBackend(max_chunk_bytes=4096)  # small chunks: every matrix here is split
    availability = backend.probe()
    if not availability.available:
        pytest.skip(f"webgpu unavailable: {availability.reason}")
    return backend


def random_matrix(name: str, type_name: str, rows: int, cols: int, rng: np.random.Generator) -> TensorInfo:
    """A tensor of random GGML blocks (random quants, small positive scales)."""
    qtype = GGMLQuantizationType[type_name]
    if type_name in ("F32", "F16"):
        data = rng.standard_normal((rows, cols)).astype(np.float32 if type_name == "F32" else np.float16)
        return TensorInfo(name, qtype, (rows, cols), data)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    for offset in HALF_FIELDS[type_name]:
        scales = rng.uniform(0.002, 0.02, raw.shape[0]).astype(np.float16)
        raw[:, offset:offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return TensorInfo(name, qtype, (rows, cols), raw.reshape(rows, -1))


def vector(name: str, values: np.ndarray) -> TensorInfo:
    return TensorInfo(name, GGMLQuantizationType.F32, (values.size,), values.astype(np.float32))


def one_sequence(n: int, start: int = 0, pages=(3, 0, 5, 1, 7, 2, 6, 4)) -> Batch:
    """n tokens of one sequence at positions start.., its pages deliberately out of order."""
    return Batch(tokens=np.arange(n, dtype=np.int32) % 16, positions=np.arange(start, start + n, dtype=np.int32),
                 seq_index=np.zeros(n, np.int32), page_tables=[np.asarray(pages, np.int32)],
                 kv_lens=np.asarray([start + n], np.int32), logit_rows=np.asarray([n - 1], np.int32))


def run_both(webgpu, nodes, output, tensors, batches, spec=None) -> list[tuple[np.ndarray, np.ndarray]]:
    spec = spec or KvSpec(n_layers=1, n_kv_heads=2, key_dim=32, value_dim=32, page_size=4, max_pages=8)
    graph = Graph(nodes=tuple(nodes), output=output, n_vocab=0)
    results = []
    exes = []
    for backend in (ReferenceBackend(), webgpu):
        weights = backend.load_weights(tensors)
        exes.append(backend.compile(graph, weights, backend.kv_store(spec)))
    for batch in batches:
        results.append((exes[0](batch), exes[1](batch)))
    return results


def assert_close(ref: np.ndarray, got: np.ndarray, nmse: float = 1e-7) -> None:
    assert got.shape == ref.shape and np.isfinite(got).all()
    err = float(np.mean((ref.astype(np.float64) - got) ** 2) / max(np.mean(ref.astype(np.float64) ** 2), 1e-30))
    assert err < nmse, f"nmse {err:.3g}"


def inputs(width: int, rng, name: str = "table") -> TensorInfo:
    """An F32 table whose rows the embed op turns into the random activations of a test."""
    return TensorInfo(name, GGMLQuantizationType.F32, (16, width), rng.standard_normal((16, width)).astype(np.float32))


@pytest.mark.parametrize("type_name", WEIGHT_TYPES)
def test_packing_keeps_every_byte(type_name):
    rng = np.random.default_rng(1)
    t = random_matrix("w", type_name, 3, 256, rng)
    words, header = pack_rows(type_name, t.raw_rows())
    layout = LAYOUTS[type_name]
    assert words.nbytes - t.raw_rows().nbytes < 4
    assert header * 4 == t.raw_rows().size // layout.block_bytes * layout.payload_bytes


@pytest.mark.parametrize("type_name", WEIGHT_TYPES)
def test_matmul_and_embed_every_weight_type(webgpu, type_name):
    """x @ W.T + b over 1 and 11 tokens (one and two token tiles), and W's rows as an embedding."""
    rng = np.random.default_rng(2)
    tensors = {"table": inputs(256, rng), "w": random_matrix("w", type_name, 40, 256, rng),
               "b": vector("b", rng.standard_normal(40))}
    nodes = [G.Embed("x", "table"), G.MatMul("y", "x", "w", "b"), G.Embed("e", "w", 0.5)]
    for output in ("y", "e"):
        for ref, got in run_both(webgpu, nodes, output, tensors, [one_sequence(1), one_sequence(11)]):
            assert_close(ref, got, 1e-10 if output == "e" else 1e-7)


def test_elementwise_ops_and_select_rows(webgpu):
    rng = np.random.default_rng(3)
    tensors = {"table": inputs(100, rng), "table2": inputs(100, rng, "table2")}  # 100: padded float rows
    nodes = [G.Embed("a", "table", 3.0), G.Embed("b", "table2"), G.Add("s", "a", "b"), G.Mul("m", "s", "b"),
             G.Scale("c", "m", 0.7), G.SiluMul("g", "c", "a"), G.GeluMul("h", "g", "b"), G.Softcap("o", "h", 2.5),
             G.SelectRows("out", "o")]
    batch = one_sequence(6)
    batch.logit_rows = np.asarray([5, 0, 3], np.int32)
    for output in ("s", "m", "c", "g", "h", "o", "out"):
        for ref, got in run_both(webgpu, nodes, output, tensors, [batch]):
            assert_close(ref, got, 1e-10)


@pytest.mark.parametrize("group,weighted,offset", [(0, True, 0.0), (32, True, 1.0), (0, False, 0.0)])
def test_rms_norm(webgpu, group, weighted, offset):
    rng = np.random.default_rng(4)
    width = 96 if group == 0 else 128
    tensors = {"table": inputs(width, rng)}
    if weighted:
        tensors["nw"] = vector("nw", rng.standard_normal(group or width))
    nodes = [G.Embed("x", "table"), G.RmsNorm("out", "x", "nw" if weighted else None, 1e-5, group, offset)]
    for ref, got in run_both(webgpu, nodes, "out", tensors, [one_sequence(5)]):
        assert_close(ref, got, 1e-10)


@pytest.mark.parametrize("mode,n_rot", [("normal", 32), ("neox", 32), ("neox", 16)])
def test_rope(webgpu, mode, n_rot):
    rng = np.random.default_rng(5)
    tensors = {"table": inputs(128, rng)}
    nodes = [G.Embed("x", "table"), G.Rope("out", "x", n_heads=4, head_dim=32, n_rot=n_rot, mode=mode,
                                          base=10000.0, freq_scale=0.5)]
    for ref, got in run_both(webgpu, nodes, "out", tensors, [one_sequence(5, start=3), one_sequence(1, start=200, pages=tuple(range(64)))]):
        assert_close(ref, got, 1e-10)


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (5.0, 3)])
def test_attention_over_pages_prefill_then_decode(webgpu, softcap, window):
    """GQA (4 query heads over 2 KV heads), pages out of order, a prefill then a decode step."""
    rng = np.random.default_rng(6)
    tensors = {"tq": inputs(128, rng, "tq"), "tk": inputs(64, rng, "tk"), "tv": inputs(64, rng, "tv")}
    nodes = [G.Embed("q", "tq"), G.Embed("k", "tk"), G.Embed("v", "tv"), G.KvWrite(0, "k", "v"),
             G.Attention("out", "q", 0, n_heads=4, n_kv_heads=2, key_dim=32, value_dim=32, scale=0.3,
                         softcap=softcap, window=window)]
    decode = one_sequence(1, start=9)
    decode.tokens = np.asarray([13], np.int32)
    for ref, got in run_both(webgpu, nodes, "out", tensors, [one_sequence(9), decode]):
        assert_close(ref, got, 1e-9)


def test_attention_two_sequences_in_one_pass_and_page_io(webgpu):
    from llamay_backends.webgpu.backend import WebGPUBackend

    rng = np.random.default_rng(7)
    tensors = {"tq": inputs(64, rng, "tq"), "tk": inputs(64, rng, "tk"), "tv": inputs(64, rng, "tv")}
    nodes = [G.Embed("q", "tq"), G.Embed("k", "tk"), G.Embed("v", "tv"), G.KvWrite(0, "k", "v"),
             G.Attention("out", "q", 0, n_heads=2, n_kv_heads=2, key_dim=32, value_dim=32, scale=0.2)]
    batch = Batch(tokens=np.asarray([1, 2, 3, 4, 5, 6, 7], np.int32), positions=np.asarray([0, 1, 2, 3, 4, 0, 1], np.int32),
                  seq_index=np.asarray([0, 0, 0, 0, 0, 1, 1], np.int32),
                  page_tables=[np.asarray([6, 2], np.int32), np.asarray([4], np.int32)],
                  kv_lens=np.asarray([5, 2], np.int32), logit_rows=np.asarray([4, 6], np.int32))
    [(ref, got)] = run_both(webgpu, nodes, "out", tensors, [batch])
    assert_close(ref, got, 1e-9)

    spec = KvSpec(n_layers=2, n_kv_heads=2, key_dim=32, value_dim=32, page_size=4, max_pages=8)
    store = webgpu.kv_store(spec)
    page = rng.standard_normal(spec.page_bytes() // 4).astype(np.float32).tobytes()
    store.write_page(3, page)
    store.copy_page(3, 5)
    assert store.read_page(5) == page and store.read_page(3) == page
    assert store.read_page(0) == bytes(len(page))
    assert isinstance(WebGPUBackend().capabilities.max_tokens_per_pass, int)
