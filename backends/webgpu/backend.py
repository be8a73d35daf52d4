"""The WebGPU backend object. wgpu is imported on the first probe, never at registration."""
from __future__ import annotations

import time
from typing import Mapping

from llamay_core.plugins_runtime.registry import source_fingerprint
from llamay_core.backend_api import Availability, BackendBase, Capabilities, KvSpec
from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.webgpu.formats import WEIGHT_TYPES

MAX_TOKENS_PER_PASS = 256
# moe is not among them: a MoE model's experts run on a host fallback through the graph split.
FAMILY_OPS = frozenset({"rope_table", "columns"})


class WebGPUBackend(BackendBase):
    name = "webgpu"
    version = source_fingerprint(__file__)
    capabilities = Capabilities(ops=G.OP_NAMES | G.SPLIT_OP_NAMES | FAMILY_OPS, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32"}, max_tokens_per_pass=MAX_TOKENS_PER_PASS)

    def __init__(self, max_chunk_bytes: int | None = None) -> None:
        """`max_chunk_bytes` caps a weight chunk below the device's binding limit (tests use it
        to exercise the splitting of large tensors on tiny models)."""
        self._gpu = None
        self._failure: str | None = None
        self._pipelines = None
        self.max_chunk_bytes = max_chunk_bytes
        self.compile_seconds = 0.0
        self._executables: list = []

    def _open(self):
        if self._gpu is None and self._failure is None:
            from llamay_backends.webgpu.device import NoAdapter, open_gpu
            from llamay_backends.webgpu.kernels import Pipelines

            try:
                self._gpu = open_gpu()
                self._pipelines = Pipelines(self._gpu.device)
            except NoAdapter as exc:
                self._failure = str(exc)
        return self._gpu

    def _require(self):
        gpu = self._open()
        if gpu is None:
            raise BackendError(f"backend 'webgpu' is unavailable: {self._failure}")
        return gpu

    def probe(self) -> Availability:
        gpu = self._open()
        if gpu is None:
            return Availability(False, reason=self._failure or "no WebGPU adapter")
        return Availability(True, device=gpu.name, details=dict(gpu.details))

    def load_weights(self, tensors: Mapping[str, TensorInfo]):
        from llamay_backends.webgpu.weights import WebGPUWeights

        gpu = self._require()
        limit = gpu.max_binding_bytes if self.max_chunk_bytes is None else min(self.max_chunk_bytes, gpu.max_binding_bytes)
        return WebGPUWeights(gpu, tensors, limit)

    def kv_store(self, spec: KvSpec):
        from llamay_backends.webgpu.page_store import WebGPUPageStore

        return WebGPUPageStore(self._require(), spec)

    def compile(self, graph: Graph, weights, store):
        from llamay_backends.webgpu.executable import WebGPUExecutable

        t0 = time.perf_counter()
        exe = WebGPUExecutable(self._require(), self._pipelines, graph, weights, store, MAX_TOKENS_PER_PASS)
        self.compile_seconds += time.perf_counter() - t0
        self._executables.append(exe)
        return exe

    # ---- read by `llamay bench` ----

    def describe(self) -> dict:
        return {"kernels": "wgsl", "matmul": "wgsl in-shader dequant (4 rows x 16 threads)",
                "gemm": "wgsl, 8-token tiles", "repack": "on (word-aligned payloads + packed f16 headers)"}

    def bench_lines(self) -> list[str]:
        if not self._executables:
            return []
        exe = self._executables[-1]
        return [f"webgpu: {exe.last_dispatches} dispatches per token step, 1 submission per pass "
                f"({len(exe.dispatches)} recorded into one command encoder)",
                f"webgpu last pass: cpu encoding {exe.last_encode_s * 1e3:.2f} ms, "
                f"gpu execution + readback {exe.last_gpu_s * 1e3:.2f} ms"]
