"""The CUDA backend without a GPU: probe, registration, the launch plan, page store and executor
bookkeeping (NumPy standing in for CuPy), and kernel signatures checked against nvcc's PTX.

None of these run a kernel: numbers from the kernels are checked only on a GPU machine
(benchmarks/gpu_check.sh). test_cuda_host_math.py runs the kernels' format code on the CPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import types

import attrs
import numpy as np
import pytest

from llamay_core.backend_api import Batch, KvSpec
from llamay_backends.cuda import plan as P
from llamay_backends.cuda.executor import CudaExecutable, GraphReplay
from llamay_backends.cuda.page_store import CudaPageStore
from llamay_backends.cuda.paging import PageLayout
from llamay_backends.cuda.weights import DeviceWeights


# ---- probe and registration -------------------------------------------------------------------

@pytest.fixture()
def fresh_probe(monkeypatch):
    from llamay_backends.cuda import backend

    monkeypatch.setattr(backend, "_probe_cache", [])


def test_probe_without_cupy_says_how_to_install(monkeypatch, fresh_probe):
    from llamay_backends.cuda.probe import probe_cuda

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    a = probe_cuda()
    assert not a.available and "CuPy is not installed" in a.reason and "llamay[cuda]" in a.reason


def test_probe_with_cupy_but_no_driver_reports_cuda_error(monkeypatch, fresh_probe):
    from llamay_backends.cuda.backend import CudaBackend

    class CUDARuntimeError(RuntimeError):
        pass

    def no_driver():
        raise CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_driver))
    err_mod = types.ModuleType("cupy_backends.cuda.api.runtime")
    err_mod.CUDARuntimeError = CUDARuntimeError
    for name in ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.api"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.api.runtime", err_mod)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    a = CudaBackend().probe()
    assert not a.available
    assert a.reason == "no usable CUDA driver or device: cudaErrorInsufficientDriver: CUDA driver version is insufficient"


def test_real_cupy_without_gpu_is_unavailable(fresh_probe):
    cupy = pytest.importorskip("cupy")
    if cupy.is_available():
        pytest.skip("a CUDA device is present")
    from llamay_backends.cuda.probe import probe_cuda

    a = probe_cuda()
    assert not a.available and a.reason.startswith("no usable CUDA driver or device: ")


def test_importing_llamay_and_listing_backends_never_imports_cupy():
    code = ("import sys, llamay; from llamay_core.plugins_runtime.manager import get_registry; "
            "r = get_registry(); assert r.backends['cuda'].priority == 90 and r.backends['metal'].priority == 80; "
            "assert 'cupy' not in sys.modules, 'cupy imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the plan on a tiny llama graph ---------------------------------------------------------------

@pytest.fixture()
def tiny(tiny_model_path):
    from llamay_core.engine.loader import build_spec
    from llamay_core.files.gguf_file import open_gguf

    gguf = open_gguf(tiny_model_path)
    spec = build_spec(gguf)
    tensors = {n: gguf.tensors[n] for n in spec.graph.weight_names()}
    hp = spec.hparams
    kv = KvSpec(n_layers=hp.n_layers, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim, value_dim=hp.value_dim,
                page_size=16, max_pages=32, dtype="f16")
    return spec.graph, tensors, kv


def make_plan(graph, tensors, kv):
    weights = DeviceWeights(tensors, np)
    shapes = {n: t.shape for n, t in weights.tensors.items()}
    kinds = {n: t.type_name for n, t in weights.tensors.items()}
    return P.build_plan(graph, shapes, kinds, kv), weights


def test_quantized_matrices_stay_in_their_blocks(tiny):
    graph, tensors, kv = tiny
    weights = DeviceWeights(tensors, np)
    for name, t in tensors.items():
        d = weights[name]
        if len(t.shape) == 2:
            assert d.type_name == t.type_name and d.data.dtype == np.uint8
            assert np.array_equal(d.data, t.raw_rows()), name  # the file's bytes, not an f32 expansion
        else:
            assert d.data.dtype == np.float32


def test_buffers_are_never_shared_by_two_live_values(tiny):
    graph, tensors, kv = tiny
    plan, _ = make_plan(graph, tensors, kv)
    names = [getattr(n, "out", None) for n in graph.nodes]
    live_until = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs():
            live_until[name] = i
    live_until[graph.output] = len(graph.nodes)
    owner: dict[int, str] = {}
    for i, (node, step) in enumerate(zip(graph.nodes, plan.steps)):
        for b in step.inputs:
            assert b != step.output, f"{node.name} would write the buffer it reads"
        if step.output is not None:
            previous = owner.get(step.output)
            assert previous is None or live_until.get(previous, -1) < i or live_until.get(previous, -1) == i, \
                f"{names[i]} overwrites {previous} while it is still read"
            assert plan.buffers[step.output].width >= step.width
            owner[step.output] = names[i]
    assert len(plan.buffers) < len([n for n in names if n]) // 2  # reuse actually happens


def test_decode_uses_matvec_and_prefill_uses_tiles_covering_every_output(tiny):
    graph, tensors, kv = tiny
    plan, _ = make_plan(graph, tensors, kv)
    decode = plan.launches(1, 1)
    assert all(not l.kernel.startswith("matmul_tiled_") for l in decode)
    assert sum(l.kernel.startswith("matvec_") for l in decode) == sum(isinstance(n, P.G.MatMul) for n in graph.nodes)
    prefill = plan.launches(100, 1)
    for launch in prefill:
        if launch.kernel.startswith("matmul_tiled_"):
            n = launch.args[-1].value
            rows = launch.args[-2].value
            assert rows == 100 and launch.grid[0] * P.TILE >= n and launch.grid[1] * P.TILE >= rows
    assert any(l.kernel.startswith("matmul_tiled_") for l in prefill)
    # the final matmul runs on the selected row only, so it stays a matvec even in prefill
    assert prefill[-1].kernel.startswith("matvec_") and prefill[-1].grid[1] == 1
    for launch in prefill:
        if launch.writes:
            index, elements = launch.writes
            assert elements <= plan.buffer_elements(512)[index]


def test_every_op_case_plans_and_copies_back_its_own_width():
    """The conformance op grid on the plan (NumPy standing in for the device): float tables of
    any width upload (padded to whole groups), and the output copied back is the output value's
    width, not the graph's n_vocab (a matmul case's is its output features)."""
    from llamay_backends.cuda.backend import CudaBackend
    from llamay_conformance.cases import FAMILY_OPS, build, grid

    caps = CudaBackend.capabilities
    cases = [c for c in grid(caps.weight_types, kv_dtypes=caps.kv_dtypes, ops=caps.ops) if c.op not in FAMILY_OPS]
    assert any(c.param("w") == 129 for c in cases) and any(c.op == "matmul" for c in cases)
    for case in cases:
        built = build(case)
        plan, weights = make_plan(built.graph, built.tensors, built.kv_spec)
        expected = case.param("out") if case.op == "matmul" else built.graph.n_vocab
        assert plan.n_vocab == expected == built.graph.n_vocab, case.id
        for name, t in built.tensors.items():
            if len(t.shape) == 2:
                assert weights[name].data.shape == (t.shape[0], plan.row_bytes[name]), (case.id, name)


def test_a_float_table_of_odd_width_is_padded_to_whole_groups():
    from llamay_core.graph import ops as G
    from llamay_core.graph.graph import Graph
    from llamay_conformance.weights import f32_tensor

    table = f32_tensor("t", np.arange(3 * 129, dtype=np.float32).reshape(3, 129))
    graph = Graph(nodes=(G.Embed("x", "t"), G.MatMul("y", "x", "w", None)), output="y", n_vocab=129)
    w = f32_tensor("w", np.ones((4, 129), np.float32))
    with pytest.raises(P.BackendError, match="groups of 8"):  # the matmul kernels step through K in 8s
        make_plan(graph, {"t": table, "w": w}, KvSpec(1, 1, 32, 32))
    plan, weights = make_plan(Graph(nodes=(G.Embed("x", "t"),), output="x", n_vocab=129), {"t": table},
                              KvSpec(1, 1, 32, 32))
    padded = weights["t"].data.view(np.float32)
    assert padded.shape == (3, 136) and np.array_equal(padded[:, :129], table.data) and not padded[:, 129:].any()
    (launch,) = plan.launches(3, 3)
    assert launch.kernel == "embed_f32" and launch.args[1].value == 136 * 4 and launch.args[3].value == 129


def test_kernel_signatures_match_compiled_ptx(tiny, tmp_path):
    from llamay_backends.cuda.compile_check import compile_all, pick_compiler, ptx_entries
    from llamay_backends.cuda.kernel_sources import file_for

    compiler = pick_compiler("nvrtc") or pick_compiler("auto")
    if compiler is None:
        pytest.skip("no CUDA compiler (nvcc or NVRTC) installed")
    ok, failed = compile_all(tmp_path, compiler=compiler)
    assert not failed, failed
    entries = {}
    for filename, ptx in ok.items():
        for kernel, params in ptx_entries(ptx.read_text()).items():
            entries[kernel] = (filename, params)
    graph, tensors, kv = tiny
    for dtype in ("f32", "f16"):
        plan, _ = make_plan(graph, tensors, attrs.evolve(kv, dtype=dtype))
        for launch in plan.launches(1, 1) + plan.launches(100, 3) + plan.launches(100, 3, tiled=False):
            assert launch.kernel in entries, f"{launch.kernel} is not defined in any .cu"
            filename, params = entries[launch.kernel]
            assert file_for(launch.kernel) == filename
            assert [a.ptx for a in launch.args] == params, launch.kernel


# ---- page store ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_page_bytes_match_the_reference_store(dtype):
    from llamay_core.state.host_pages import HostPageStore as ReferencePageStore  # the reference's store

    spec = KvSpec(n_layers=3, n_kv_heads=2, key_dim=8, value_dim=4, page_size=4, max_pages=6, dtype=dtype)
    ours, ref = CudaPageStore(spec, np, np.asarray), ReferencePageStore(spec)
    layout = PageLayout.of(spec)
    rng = np.random.default_rng(0)
    pages, slots = np.array([1, 1, 4, 5]), np.array([0, 3, 2, 1])
    for layer in range(spec.n_layers):
        k = rng.standard_normal((4, layout.kw)).astype(np.float32)
        v = rng.standard_normal((4, layout.vw)).astype(np.float32)
        ref.write(layer, pages, slots, k, v)
        flat = ours.pages.reshape(-1)  # what kv_write does on the device, through the same formula
        for i, (p, s) in enumerate(zip(pages, slots)):
            for c in range(layout.kw):
                flat[layout.index(p, layer, False, s, c)] = k[i, c]
            for c in range(layout.vw):
                flat[layout.index(p, layer, True, s, c)] = v[i, c]
    for page in range(spec.max_pages):
        assert ours.read_page(page) == ref.read_page(page)
    ours.copy_page(4, 0)
    ours.write_page(2, ref.read_page(5))
    assert ours.read_page(0) == ref.read_page(4) and ours.read_page(2) == ref.read_page(5)
    with pytest.raises(ValueError, match="expected"):
        ours.write_page(0, b"\0" * 3)


# ---- executor bookkeeping with a recording runtime ------------------------------------------------

class FakeStream:
    def __init__(self):
        self.capturing = False
        self.log = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.capturing = True
        self.log.append("begin")

    def end_capture(self):
        self.capturing = False
        self.log.append("end")
        return FakeGraph(self)


class FakeGraph:
    def __init__(self, stream):
        self.stream = stream

    def launch(self, stream):
        stream.log.append("graph")


class RecordingRuntime:
    """NumPy arrays and a stream that records; kernels are names whose launches are logged."""

    xp = np

    def __init__(self):
        self.stream = FakeStream()
        self.launched: list[tuple[str, bool]] = []

    def function(self, kernel):
        return kernel

    def launch(self, fn, grid, block, args):
        self.launched.append((fn, self.stream.capturing))

    def null_pointer(self):
        return None

    def to_host(self, a):
        return np.asarray(a)

    def upload(self, device, host):
        device[...] = host

    def event(self):
        return object()

    def record(self, e):
        pass

    def elapsed(self, a, b):
        return 0.001


def decode_batch(n_seqs: int = 1) -> Batch:
    return Batch(tokens=np.arange(n_seqs, dtype=np.int32) + 5, positions=np.full(n_seqs, 17, np.int32),
                 seq_index=np.arange(n_seqs, dtype=np.int32),
                 page_tables=[np.array([3 + s, 9], np.int32) for s in range(n_seqs)],
                 kv_lens=np.full(n_seqs, 18, np.int32), logit_rows=np.arange(n_seqs, dtype=np.int32))


def test_decode_is_eager_once_then_captured_then_one_graph_launch(tiny):
    graph, tensors, kv = tiny
    plan, weights = make_plan(graph, tensors, kv)
    rt = RecordingRuntime()
    ex = CudaExecutable(plan, weights, CudaPageStore(kv, np, np.asarray), rt, max_tokens=64)
    n = len(plan.launches(1, 1))
    logits = ex(decode_batch())
    assert logits.shape == (1, graph.n_vocab) and logits.dtype == np.float32
    assert len(rt.launched) == n and not any(c for _, c in rt.launched)  # eager
    ex(decode_batch())
    assert len(rt.launched) == 2 * n and all(c for _, c in rt.launched[n:])  # captured, not run eagerly
    assert rt.stream.log == ["begin", "end", "graph"]
    ex(decode_batch())
    assert len(rt.launched) == 2 * n and rt.stream.log[-1] == "graph"  # replay: no Python launches
    assert ex.replay.counts == {"eager": 1, "captured": 1, "replayed": 1}
    staged = ex.staging
    assert staged.views["positions"][0] == 17 and list(staged.views["page_tables"][:2]) == [3, 9]


def test_more_sequences_regrow_staging_and_drop_graphs(tiny):
    graph, tensors, kv = tiny
    plan, weights = make_plan(graph, tensors, kv)
    ex = CudaExecutable(plan, weights, CudaPageStore(kv, np, np.asarray), RecordingRuntime(), max_tokens=64)
    for _ in range(2):
        ex(decode_batch())
    assert ex.replay.graphs
    ex(decode_batch(9))  # 9 sequences > the 8 the first staging block holds
    assert ex.staging.max_seqs >= 9 and not ex.replay.graphs
    off = ex.staging.offsets["page_tables"]
    assert list(ex.staging.host[off + 8 * ex.staging.stride: off + 8 * ex.staging.stride + 2]) == [11, 9]


def test_prefill_runs_eagerly_without_capture(tiny):
    graph, tensors, kv = tiny
    plan, weights = make_plan(graph, tensors, kv)
    rt = RecordingRuntime()
    ex = CudaExecutable(plan, weights, CudaPageStore(kv, np, np.asarray), rt, max_tokens=64)
    b = Batch(tokens=np.arange(40, dtype=np.int32), positions=np.arange(40, dtype=np.int32),
              seq_index=np.zeros(40, np.int32), page_tables=[np.array([0, 1, 2], np.int32)],
              kv_lens=np.array([40], np.int32), logit_rows=np.array([39], np.int32))
    for _ in range(3):
        ex(b)
    assert rt.stream.log == [] and ex.replay.counts["eager"] == 0  # prefill bypasses the graph cache


def test_capture_failure_falls_back_to_eager():
    class BrokenStream(FakeStream):
        def begin_capture(self):
            raise RuntimeError("capture unsupported")

    replay = GraphReplay(BrokenStream(), eager_runs=0)
    ran = []
    assert replay.run("k", lambda: ran.append(1)) == "eager"
    assert replay.failure == "RuntimeError: capture unsupported" and ran == [1]
    assert replay.run("k", lambda: ran.append(1)) == "eager" and ran == [1, 1]


def test_kernels_compile_with_nvrtc_as_the_backend_compiles_them():
    """The runtime path (NVRTC, our options and include search) rather than nvcc; needs CuPy + libnvrtc."""
    pytest.importorskip("cupy")
    from cupy.cuda import nvrtc

    from llamay_backends.cuda.kernel_sources import cuda_include_dirs, nvrtc_options, source_files

    try:
        nvrtc.getVersion()
    except Exception as exc:
        pytest.skip(f"libnvrtc not loadable: {exc}")
    if not any(os.path.isfile(os.path.join(d, "crt", "mma.h")) for d in cuda_include_dirs()):
        pytest.skip("no CUDA headers with crt/mma.h found")
    for src in source_files():
        prog = nvrtc.createProgram(src.read_text(), src.name, [], [])
        try:
            nvrtc.compileProgram(prog, list(nvrtc_options("compute_90")))
        except Exception:
            pytest.fail(f"{src.name}: {nvrtc.getProgramLog(prog)}")


def test_compile_check_fails_in_ci_without_a_compiler(monkeypatch, capsys):
    from llamay_backends.cuda import compile_check

    monkeypatch.setattr(compile_check, "find_nvrtc", lambda: None)
    monkeypatch.setenv("CI", "true")
    assert compile_check.main(["--compiler", "nvrtc"]) == 1
    assert "no CUDA compiler (nvrtc) in CI" in capsys.readouterr().err
    monkeypatch.delenv("CI")
    assert compile_check.main(["--compiler", "nvrtc"]) == 0
    assert "skipped" in capsys.readouterr().out
