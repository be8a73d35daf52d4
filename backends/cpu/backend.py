"""The cpu backend: GGML block weights used in place by Numba kernels, a plan compiled once."""
from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np
from llamay_backends.cpu import isa

from llamay_core.backend_api import Availability, BackendBase, Capabilities, KvSpec
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph.graph import Graph
from llamay_core.graph.ops import EXTENDED_OP_NAMES, OP_NAMES, SPLIT_OP_NAMES
from llamay_core.plugins_runtime.registry import source_fingerprint
from llamay_core.state.host_pages import HostPageStore
from llamay_backends.cpu.repack import REPACKED_TYPES, repack
from llamay_backends.cpu.weight_arena import WeightArena, pages_note

WEIGHT_TYPES = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                          "F16", "BF16", "F32"}) | REPACKED_TYPES


class CpuWeight:
    """One tensor as the kernels read it: raw GGML rows (uint8) and the type code; vectors as f32."""

    def __init__(self, t: TensorInfo, code: int, arena: WeightArena | None = None) -> None:
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
            # read-only like the file's own pages, repacked or not: every kernel then compiles for
            # one array type, whether a Python step or a compiled program (`program.py`) calls it
            self.rows.flags.writeable = False
        self._interleaved: np.ndarray | None = None
        self._empty = arena.empty if arena is not None else np.empty  # where its interleaved copy goes

    def interleaved(self) -> np.ndarray | None:
        """The rows interleaved eight at a time for the int8 decode kernel (`kernels/interleaved.py`),
        packed on first use (into the model's `WeightArena` where `load_weights` gave one, beside
        the weights packed before it) and shared by every plan; None where the format or shape
        has none."""
        from llamay_backends.cpu import kernels

        if self._interleaved is None and self.rows is not None:
            cols = kernels.row_elems(self.code, self.rows.shape[1])
            if kernels.can_interleave(self.code, self.rows.shape[0], cols):
                self._interleaved = kernels.interleave(self.code, self.rows, self._empty)
                self._interleaved.flags.writeable = False
        return self._interleaved


class CpuBackend(BackendBase):
    name = "cpu"
    version = source_fingerprint(__file__)
    capabilities = Capabilities(ops=OP_NAMES | SPLIT_OP_NAMES | EXTENDED_OP_NAMES, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32", "f16", "vq8"}, max_tokens_per_pass=512, device_kind="host")

    def __init__(self) -> None:
        self.threads: int | None = None
        self.compile_seconds = 0.0
        self.option_error = ""
        try:
            self.activations = activations_option()
            level = isa.requested()
        except ValueError as exc:  # reported by probe(), as the backend being unavailable
            self.activations, level, self.option_error = "float", "auto", str(exc)
        # conformance records vouch for one decode path and one kernel build
        self.version = f"{CpuBackend.version}+{self.activations}" + ("" if level == "auto" else f"+{level}")

    def probe(self) -> Availability:
        try:
            import numba
        except ImportError as exc:
            return Availability(False, reason=f"numba is not installed ({exc})")
        if self.option_error:
            return Availability(False, reason=self.option_error)
        import platform

        return Availability(True, device=f"host cpu ({platform.machine()}, {numba.config.NUMBA_NUM_THREADS} threads)",
                            details={"numba": numba.__version__, "threading layer": _threading_layer()})

    def set_threads(self, n: int) -> None:
        import numba

        self.threads = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
        numba.set_num_threads(self.threads)

    def describe(self) -> dict[str, str]:
        from llamay_backends.cpu import kernels

        level = isa.describe(set(kernels.FEATURES))
        if isa.requested() != "auto":
            level += f" (forced by {isa.ENV})"
        dot = "vpdpbusd" if kernels.HAS_VNNI else "vpmaddubsw" if kernels.HAS_AVX2 else None
        decode = f"int8 activations ({dot})" if self.activations == "int8" and dot else "float activations"
        repack = (f"8-row interleave for int8 decode (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q3_K, Q4_K, Q5_K, Q6_K) on "
                  f"{pages_note()}"
                  if "int8" in decode else "off")
        return {"kernels": level, "matmul": f"cpu, decode {decode} by {_decode_runner()}",
                "gemm": f"dequantized tiles + {isa.blas_note(isa.blas_core(), isa.requested())}", "repack": repack}

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> dict[str, CpuWeight]:
        t0 = time.perf_counter()
        from llamay_backends.cpu import kernels

        self.compile_seconds += time.perf_counter() - t0
        packed = {name: repack(t) for name, t in tensors.items()}
        arena = WeightArena()  # the model's interleaved copies, end to end on huge pages
        return {name: CpuWeight(t, kernels.type_code(t.type_name), arena) for name, t in packed.items()}

    def kv_store(self, spec: KvSpec) -> HostPageStore:
        return HostPageStore(spec)

    def compile(self, graph: Graph, weights: dict[str, CpuWeight], store: HostPageStore) -> Any:
        from llamay_backends.cpu.plan import CpuPlan

        t0 = time.perf_counter()
        plan = CpuPlan(graph, weights, store, max_tokens=self.capabilities.max_tokens_per_pass,
                       int8_decode=self.activations == "int8")
        plan.warm_up()
        self.compile_seconds += time.perf_counter() - t0
        return plan


ACTIVATIONS_ENV = "LLAMAY_CPU_ACTIVATIONS"


def activations_option() -> str:
    """How decode multiplies quantized weights, from LLAMAY_CPU_ACTIVATIONS: `int8` (the default:
    each row's activations quantized per 32 to 8 bits, integer dots, as llama.cpp) or `float`
    (exact float activations).

    Both run the grouped kernels (`kernels/_grouped.py`): a weight run is unpacked once for a
    step's rows and every row gets the same bits alone or batched. int8 (the logits matmul
    included) passes the calibrated conformance (mean KL divergence vs reference 5.7e-3 on
    smollm2:135m, 1.2e-3 on qwen2.5-coder:0.5b, 2.7e-3 on gemma3:270m; limit 1e-2). On CPUs without AVX2 or VNNI dots
    the quantized formats decode with float activations whatever this says.
    """
    value = os.environ.get(ACTIVATIONS_ENV, "int8").strip().lower() or "int8"
    if value not in ("int8", "float"):
        raise ValueError(f"{ACTIVATIONS_ENV}={value!r}: expected int8 or float")
    return value


def _decode_runner() -> str:
    """How a decode pass's compiled stretches run (backends/cpu/team.py)."""
    from llamay_backends.cpu import program, team

    threads = team.team_threads() if os.environ.get(program.TEAM_ENV, "1") != "0" else 0
    return f"a team of {threads} threads" if threads else "one parallel loop per op"


def _threading_layer() -> str:
    try:
        import numba

        return numba.threading_layer()
    except Exception:  # the layer is known only after the first parallel call
        return os.environ.get("NUMBA_THREADING_LAYER", "default")
