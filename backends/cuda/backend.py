"""The CUDA backend object: the contract in llamay_core/backend_api.py on top of CuPy."""
from __future__ import annotations

from typing import Any, Mapping

from llamay_core.plugins_runtime.registry import source_fingerprint
from llamay_core.backend_api import Availability, BackendBase, Capabilities, KvSpec
from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph.graph import Graph
from llamay_core.graph.ops import OP_NAMES
from llamay_backends.cuda import formats
from llamay_backends.cuda.executor import CudaExecutable
from llamay_backends.cuda.page_store import CudaPageStore
from llamay_backends.cuda.plan import build_plan
from llamay_backends.cuda.probe import probe_cuda
from llamay_backends.cuda.weights import DeviceWeights

MAX_TOKENS_PER_PASS = 512

_probe_cache: list[Availability] = []


class CudaBackend(BackendBase):
    name = "cuda"
    version = source_fingerprint(__file__)
    capabilities = Capabilities(ops=OP_NAMES, weight_types=formats.WEIGHT_TYPES, kv_dtypes={"f32", "f16"},
                                max_tokens_per_pass=MAX_TOKENS_PER_PASS)

    def __init__(self, runtime: Any = None) -> None:
        self._rt = runtime
        self.executables: list[CudaExecutable] = []
        self.compile_seconds = 0.0

    def probe(self) -> Availability:
        if self._rt is not None:
            return Availability(True, device="injected runtime")
        if not _probe_cache:  # importing CuPy and asking the driver costs about a second: once per process
            _probe_cache.append(probe_cuda())
        return _probe_cache[0]

    @property
    def runtime(self) -> Any:
        if self._rt is None:
            availability = self.probe()
            if not availability.available:
                raise BackendError(f"backend 'cuda' is unavailable: {availability.reason}")
            from llamay_backends.cuda.runtime import CupyRuntime

            self._rt = CupyRuntime()
        return self._rt

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> DeviceWeights:
        return DeviceWeights(tensors, self.runtime.xp)

    def kv_store(self, spec: KvSpec) -> CudaPageStore:
        return CudaPageStore(spec, self.runtime.xp, self.runtime.to_host)

    def compile(self, graph: Graph, weights: DeviceWeights, store: CudaPageStore) -> CudaExecutable:
        shapes = {name: t.shape for name, t in weights.tensors.items()}
        types = {name: t.type_name for name, t in weights.tensors.items()}
        plan = build_plan(graph, shapes, types, store.spec)
        rt = self.runtime
        # Compile every module now, so load time (not the first token) pays for NVRTC; the
        # tensor-core module needs the toolkit's mma headers, and without them prefill uses matvec.
        from llamay_backends.cuda.kernel_sources import source_files

        tiled = True
        for src in source_files():
            if not rt.can_compile(src.name):
                if src.name != "matmul_tiled.cu":
                    raise BackendError(f"cuda: {src.name} failed to compile: {rt.module_errors[src.name]}")
                tiled = False
        self.compile_seconds = rt.compile_seconds
        executable = CudaExecutable(plan, weights, store, rt, MAX_TOKENS_PER_PASS, tiled_matmul=tiled)
        self.executables.append(executable)
        return executable

    def describe(self) -> dict[str, str]:
        tiled = all(e.tiled_matmul for e in self.executables)
        return {"kernels": "cuda c (nvrtc)", "matmul": f"cuda:{self.probe().device.split(' (')[0]}",
                "gemm": "own kernels, wmma f16 tiles" if tiled else "own kernels, matvec only (no mma headers)",
                "repack": "off (GGML blocks in place)"}

    def bench_lines(self) -> list[str]:
        """The seed's GPU lines: where device time went, and what one decode step costs in launches."""
        lines = []
        for e in self.executables:
            t = e.times
            lines.append(f"gpu time: staging {t.staging * 1e3:.1f}ms · kernels {t.kernels * 1e3:.1f}ms · "
                         f"copy-back {t.copy_back * 1e3:.1f}ms")
            if e.replay is not None:
                c = e.replay.counts
                note = f" (capture failed: {e.replay.failure})" if e.replay.failure else ""
                decode = e.launches_per_pass.get((1, 1))
                lines.append(f"cuda graphs: {c['replayed']} replays, {c['captured']} captures, {c['eager']} eager passes"
                             + (f"; a decode step is {decode} kernels in one graph launch" if decode else "") + note)
        return lines
