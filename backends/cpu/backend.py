"""The cpu backend: GGML block weights used in place by Numba kernels, a plan compiled once."""
from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np

from llamay_core.backend_api import Availability, Capabilities, KvSpec
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph.graph import Graph
from llamay_core.graph.ops import EXTENDED_OP_NAMES, OP_NAMES, SPLIT_OP_NAMES
from llamay_core.plugins_runtime.registry import source_fingerprint
from llamay_core.state.host_pages import HostPageStore
from llamay_backends.cpu.repack import REPACKED_TYPES, repack

WEIGHT_TYPES = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                          "F16", "BF16", "F32"}) | REPACKED_TYPES


class CpuWeight:
    """One tensor as the kernels read it: raw GGML rows (uint8) and the type code; vectors as f32."""

    def __init__(self, t: TensorInfo, code: int) -> None:
        self.name = t.name
        self.shape = t.shape
        self.type_name = t.type_name
        self.code = code
        if len(t.shape) == 1:
            from gguf.quants import dequantize

            self.vector = dequantize(t.raw_rows(), t.ggml_type).astype(np.float32).reshape(-1)
            self.rows = None
        else:
            self.vector = None
            self.rows = np.ascontiguousarray(t.raw_rows())


class CpuBackend:
    name = "cpu"
    version = source_fingerprint(__file__)
    capabilities = Capabilities(ops=OP_NAMES | SPLIT_OP_NAMES | EXTENDED_OP_NAMES, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32", "f16", "vq8"}, max_tokens_per_pass=512)

    def __init__(self) -> None:
        self.threads: int | None = None
        self.compile_seconds = 0.0

    def probe(self) -> Availability:
        try:
            import numba
        except ImportError as exc:
            return Availability(False, reason=f"numba is not installed ({exc})")
        import platform

        return Availability(True, device=f"host cpu ({platform.machine()}, {numba.config.NUMBA_NUM_THREADS} threads)",
                            details={"numba": numba.__version__, "threading layer": _threading_layer()})

    def set_threads(self, n: int) -> None:
        import numba

        self.threads = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
        numba.set_num_threads(self.threads)

    def describe(self) -> dict[str, str]:
        from llamay_core.cli.version_cmd import cpu_features

        feats = "+".join(f for f in cpu_features() if f in ("avx2", "fma", "f16c", "neon", "i8mm")) or "generic"
        return {"kernels": feats, "matmul": "cpu", "gemm": "dequantized tiles + BLAS sgemm", "repack": "off"}

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> dict[str, CpuWeight]:
        t0 = time.perf_counter()
        from llamay_backends.cpu import kernels

        self.compile_seconds += time.perf_counter() - t0
        packed = {name: repack(t) for name, t in tensors.items()}
        return {name: CpuWeight(t, kernels.type_code(t.type_name)) for name, t in packed.items()}

    def kv_store(self, spec: KvSpec) -> HostPageStore:
        return HostPageStore(spec)

    def compile(self, graph: Graph, weights: dict[str, CpuWeight], store: HostPageStore) -> Any:
        from llamay_backends.cpu.plan import CpuPlan

        t0 = time.perf_counter()
        plan = CpuPlan(graph, weights, store, max_tokens=self.capabilities.max_tokens_per_pass)
        plan.warm_up()
        self.compile_seconds += time.perf_counter() - t0
        return plan


def _threading_layer() -> str:
    try:
        import numba

        return numba.threading_layer()
    except Exception:  # the layer is known only after the first parallel call
        return os.environ.get("NUMBA_THREADING_LAYER", "default")
