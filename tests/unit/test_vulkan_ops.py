"""Each op of the Vulkan backend against the reference, through small graphs on random inputs.

Skips when Vulkan is unavailable here. Shapes are small: lavapipe is slow.
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

WEIGHT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K", "F16", "F32")
SCALE_OFFSETS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}


@pytest.fixture(scope="module")
def vulkan():
    from llamay_backends.vulkan.backend import VulkanBackend

    backend = VulkanBackend()
    availability = backend.probe()
    if not availability.available:
        pytest.skip(f"vulkan unavailable: {availability.reason}")
    return backend


def random_tensor(name: str, type_name: str, rows: int, cols: int, rng: np.random.Generator) -> TensorInfo:
    """A matrix of random GGML blocks: random quant bits, small valid f16 scales."""
    qtype = GGMLQuantizationType[type_name]
    if type_name == "F32":
        data = rng.standard_normal((rows, cols)).astype(np.float32)
    elif type_name == "F16":
        data = rng.standard_normal((rows, cols)).astype(np.float16)
    else:
        block, size = GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
        for off in SCALE_OFFSETS[type_name]:
            scales = (rng.uniform(0.2, 1.0, blocks.shape[0]) * 0.05).astype(np.float16)
            blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
        data = blocks.reshape(-1)
    return TensorInfo(name, qtype, (rows, cols), data)


def f32_tensor(name: str, values: np.ndarray) -> TensorInfo:
    return TensorInfo(name, GGMLQuantizationType.F32, tuple(values.shape), values.astype(np.float32))


def batch_of(positions_per_seq: list[list[int]], tables: list[list[int]], rows=None, tokens=None) -> Batch:
    positions = [p for ps in positions_per_seq for p in ps]
    seq = [s for s, ps in enumerate(positions_per_seq) for _ in ps]
    n = len(positions)
    return Batch(tokens=np.asarray(tokens if tokens is not None else np.arange(n), np.int32),
                 positions=np.asarray(positions, np.int32), seq_index=np.asarray(seq, np.int32),
                 page_tables=[np.asarray(t, np.int32) for t in tables],
                 kv_lens=np.asarray([max(ps) + 1 for ps in positions_per_seq], np.int32),
                 logit_rows=np.asarray(rows if rows is not None else np.arange(n), np.int32))


def run_both(vulkan, nodes, output, tensors, batches, spec=None):
    """Run the graph on reference and vulkan with fresh stores; outputs of every batch."""
    from llamay_backends.reference.backend import ReferenceBackend

    graph = Graph(tuple(nodes), output, 0)
    spec = spec or KvSpec(n_layers=1, n_kv_heads=1, key_dim=32, value_dim=32, page_size=4, max_pages=16)
    results = []
    for backend in (ReferenceBackend(), vulkan):
        weights = backend.load_weights(tensors)
        exe = backend.compile(graph, weights, backend.kv_store(spec))
        results.append([exe(b) for b in batches])
    return results


def inputs(name: str, rng, t: int, width: int) -> tuple[TensorInfo, G.Embed]:
    """An f32 table whose rows are the inputs: token t selects row t."""
    return f32_tensor(name, rng.standard_normal((t, width))), G.Embed(name.split(".")[0], name)


def assert_close(ref, got, tol=1e-4):
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        scale = max(1.0, float(np.abs(a).max()))
        assert np.abs(a - b).max() <= tol * scale, np.abs(a - b).max()


@pytest.mark.parametrize("type_name", WEIGHT_TYPES)
def test_matmul_and_embed_read_every_weight_type(vulkan, type_name):
    rng = np.random.default_rng(1)
    t, k, n = 9, 256, 40  # 9 tokens: a full tile of 8 and a partial one
    x_table, embed = inputs("x.weight", rng, t, k)
    w = random_tensor("w.weight", type_name, n, k, rng)
    bias = f32_tensor("b.bias", rng.standard_normal(n))
    table = random_tensor("tab.weight", type_name, 12, k, rng)
    nodes = [embed, G.MatMul("y", "x", "w.weight", "b.bias"), G.Embed("e", "tab.weight", scale=0.5),
             G.MatMul("z", "e", "w.weight"), G.Add("out", "y", "z")]
    tensors = {i.name: i for i in (x_table, w, bias, table)}
    ref, got = run_both(vulkan, nodes, "out", tensors, [batch_of([list(range(t))], [[0, 1, 2]],
                                                                  tokens=[0, 3, 1, 4, 1, 5, 8, 2, 6])])
    assert_close(ref, got)


def test_matmul_decode_shape_and_split_tensors(vulkan, monkeypatch):
    """One token (decode), and weights split in chunks when over the storage-binding limit."""
    from llamay_backends.reference.backend import ReferenceBackend

    rng = np.random.default_rng(2)
    k, n = 128, 70
    x_table, embed = inputs("x.weight", rng, 30, k)
    w = random_tensor("w.weight", "Q8_0", n, k, rng)
    table = random_tensor("tab.weight", "Q4_0", 30, k, rng)
    tensors = {i.name: i for i in (x_table, w, table)}
    with monkeypatch.context() as patch:
        patch.setattr(vulkan.device, "max_binding", 8 * 136)  # 8 Q8_0 rows per chunk
        weights = vulkan.load_weights(tensors)
    assert len(weights.tensors["w.weight"].chunks) == 9
    assert len(weights.tensors["tab.weight"].chunks) == 2
    spec = KvSpec(n_layers=1, n_kv_heads=1, key_dim=32, value_dim=32, page_size=4, max_pages=2)
    graph = Graph((embed, G.MatMul("y", "x", "w.weight"), G.Embed("e", "tab.weight"),
                   G.MatMul("z", "e", "w.weight"), G.Add("out", "y", "z")), "out", 0)
    batches = [batch_of([[0]], [[0]], tokens=[2]), batch_of([[1, 2, 3]], [[0]], tokens=[29, 0, 17])]
    ref = ReferenceBackend()
    ref_exe = ref.compile(graph, ref.load_weights(tensors), ref.kv_store(spec))
    vk_exe = vulkan.compile(graph, weights, vulkan.kv_store(spec))
    for batch in batches:
        assert_close([ref_exe(batch)], [vk_exe(batch)])


def test_words32_kernels_for_devices_without_16bit_storage(vulkan, monkeypatch):
    rng = np.random.default_rng(3)
    x_table, embed = inputs("x.weight", rng, 3, 256)
    tensors = {x_table.name: x_table}
    nodes = [embed]
    for type_name in ("Q4_0", "Q6_K", "F32"):
        tensors[f"{type_name}.weight"] = random_tensor(f"{type_name}.weight", type_name, 16, 256, rng)
        nodes.append(G.MatMul(f"y{type_name}", "x", f"{type_name}.weight"))
    nodes += [G.Add("s", "yQ4_0", "yQ6_K"), G.Add("out", "s", "yF32")]
    monkeypatch.setattr(vulkan.device, "storage16", False)
    ref, got = run_both(vulkan, nodes, "out", tensors, [batch_of([[0, 1, 2]], [[0]])])
    assert_close(ref, got)


def test_elementwise_and_norm_ops(vulkan):
    rng = np.random.default_rng(4)
    t, d = 5, 96
    a_table, a = inputs("a.weight", rng, t, d)
    b_table = f32_tensor("b.weight", rng.standard_normal((t, d)))
    norm = f32_tensor("n.weight", 1 + 0.1 * rng.standard_normal(d))
    head_norm = f32_tensor("h.weight", 1 + 0.1 * rng.standard_normal(32))
    nodes = [a, G.Embed("b", "b.weight"), G.Mul("m", "a", "b"), G.Scale("s", "m", 0.7), G.Softcap("c", "s", 1.5),
             G.SiluMul("sw", "c", "b"), G.GeluMul("gg", "sw", "a"), G.RmsNorm("r", "gg", "n.weight", 1e-5),
             G.RmsNorm("rh", "r", "h.weight", 1e-6, group=32, weight_offset=1.0),
             G.RmsNorm("rn", "rh", None, 1e-5), G.Add("sum", "rn", "a"), G.SelectRows("out", "sum")]
    tensors = {i.name: i for i in (a_table, b_table, norm, head_norm)}
    ref, got = run_both(vulkan, nodes, "out", tensors, [batch_of([list(range(t))], [[0, 1]], rows=[4, 1])])
    assert got[0].shape == (2, d)
    assert_close(ref, got)


@pytest.mark.parametrize("mode", ["normal", "neox"])
def test_rope(vulkan, mode):
    rng = np.random.default_rng(5)
    heads, head_dim = 3, 32
    x_table, x = inputs("x.weight", rng, 4, heads * head_dim)
    nodes = [x, G.Rope("out", "x", n_heads=heads, head_dim=head_dim, n_rot=24, mode=mode, base=10000.0,
                       freq_scale=0.5)]
    batch = batch_of([[0, 1, 200], [37]], [[0] * 60, [1] * 60])
    ref, got = run_both(vulkan, nodes, "out", {x_table.name: x_table}, [batch])
    assert_close(ref, got, 2e-4)


@pytest.mark.parametrize("kv_dtype", ["f32", "f16"])
@pytest.mark.parametrize("window,softcap", [(0, 0.0), (3, 20.0)])
def test_kv_write_and_attention_over_pages(vulkan, kv_dtype, window, softcap):
    """Two sequences on scattered pages, a prompt pass then a decode pass (GQA: 4 heads on 2)."""
    rng = np.random.default_rng(6)
    heads, kv_heads, dim = 4, 2, 32
    spec = KvSpec(n_layers=2, n_kv_heads=kv_heads, key_dim=dim, value_dim=dim, page_size=4, max_pages=16,
                  dtype=kv_dtype)
    q_t, q = inputs("q.weight", rng, 16, heads * dim)
    k_t = f32_tensor("k.weight", rng.standard_normal((16, kv_heads * dim)))
    v_t = f32_tensor("v.weight", rng.standard_normal((16, kv_heads * dim)))
    nodes = [q, G.Embed("k", "k.weight"), G.Embed("v", "v.weight"), G.KvWrite(1, "k", "v"),
             G.Attention("out", "q", 1, heads, kv_heads, dim, dim, dim ** -0.5, softcap, window)]
    tensors = {i.name: i for i in (q_t, k_t, v_t)}
    tables = [[5, 2, 9], [7, 0]]
    prompt = batch_of([list(range(6)), list(range(3))], tables, tokens=list(range(9)))
    decode = batch_of([[6], [3]], tables, tokens=[10, 11])
    ref, got = run_both(vulkan, nodes, "out", tensors, [prompt, decode], spec)
    assert_close(ref, got, 2e-3 if kv_dtype == "f16" else 1e-4)


def test_page_store_read_write_copy(vulkan):
    spec = KvSpec(n_layers=2, n_kv_heads=1, key_dim=32, value_dim=32, page_size=4, max_pages=8, dtype="f16")
    store = vulkan.kv_store(spec)
    data = np.random.default_rng(7).integers(0, 256, spec.page_bytes(), dtype=np.uint8).tobytes()
    store.write_page(3, data)
    assert store.read_page(3) == data
    store.copy_page(3, 6)
    assert store.read_page(6) == data
    store.write_page(3, bytes(spec.page_bytes()))
    assert store.read_page(6) == data
    with pytest.raises(ValueError):
        store.write_page(1, data[:-2])


def test_odd_widths_and_long_page_tables(vulkan):
    """Float tables of any width; page tables longer than the plan first made room for."""
    rng = np.random.default_rng(8)
    x_table, x = inputs("x.weight", rng, 3, 129)
    half_table = TensorInfo("h.weight", GGMLQuantizationType.F16, (3, 129),
                            rng.standard_normal((3, 129)).astype(np.float16))
    nodes = [x, G.Embed("h", "h.weight", scale=2.0), G.Add("s", "x", "h"), G.RmsNorm("out", "s", None, 1e-5)]
    long_table = list(range(16)) * 200  # positions up to 12000 with 4-token pages
    batch = batch_of([[0, 5000, 11999]], [long_table])
    ref, got = run_both(vulkan, nodes, "out", {x_table.name: x_table, half_table.name: half_table}, [batch])
    assert_close(ref, got)


@pytest.mark.parametrize("glu", [G.SiluMul, G.GeluMul])
def test_glu_and_residual_fused_into_matmul(vulkan, glu):
    """gate/up activations computed while the matmul loads x, residual added by the matmul; large
    inputs check that tanh and exp saturate instead of making NaN."""
    rng = np.random.default_rng(9)
    t, k, n = 3, 64, 40
    g_table = f32_tensor("g.weight", rng.standard_normal((t, k)) * 30)
    u_table = f32_tensor("u.weight", rng.standard_normal((t, k)))
    r_table = f32_tensor("r.weight", rng.standard_normal((t, n)))
    w = random_tensor("w.weight", "Q8_0", n, k, rng)
    nodes = [G.Embed("r", "r.weight"), G.Embed("g", "g.weight"), G.Embed("u", "u.weight"), glu("m", "g", "u"),
             G.MatMul("y", "m", "w.weight"), G.Add("out", "r", "y")]
    tensors = {i.name: i for i in (g_table, u_table, r_table, w)}
    from llamay_backends.vulkan.plan import VulkanPlan

    plan = vulkan.compile(Graph(tuple(nodes), "out", 0), vulkan.load_weights(tensors),
                          vulkan.kv_store(KvSpec(1, 1, 32, 32, 4, 2)))
    assert isinstance(plan, VulkanPlan) and plan.dispatches == 4  # 3 embeds + 1 matmul
    ref, got = run_both(vulkan, nodes, "out", tensors, [batch_of([[0, 1, 2]], [[0]])])
    assert np.isfinite(got[0]).all()
    assert_close(ref, got)
