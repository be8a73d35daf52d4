"""The Vulkan backend object: probes the driver, uploads weights, builds plans.

Nothing here imports the `vulkan` binding at module level: a machine without libvulkan or a
driver gets "unavailable: <reason>" from probe(), never an import crash.
"""
from __future__ import annotations

import importlib
import time
from typing import Any, Mapping

from llamay_core.backend_api import Availability, BackendBase, Capabilities, KvSpec
from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph.graph import Graph
from llamay_core.graph.ops import OP_NAMES, SPLIT_OP_NAMES
from llamay_backends.vulkan.shader_build import SPV_DIR, WEIGHT_TYPES, kernel_variants

# 128 keeps a pass's logits (128 x vocab floats) within a 128 MiB storage binding for vocabularies
# up to 262k; prefill tiles of 128 tokens already reuse each decoded weight 128 times.
MAX_TOKENS_PER_PASS = 128
# moe is not among them: a MoE model's experts run on a host fallback through the graph split.
FAMILY_OPS = frozenset({"rope_table", "columns"})


class VulkanBackend(BackendBase):
    name = "vulkan"
    version = "1"
    capabilities = Capabilities(ops=OP_NAMES | SPLIT_OP_NAMES | FAMILY_OPS, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32", "f16"}, max_tokens_per_pass=MAX_TOKENS_PER_PASS)

    def __init__(self) -> None:
        self._device: Any = None
        self._availability: Availability | None = None
        self._plans: list[Any] = []
        self.compile_seconds = 0.0

    def probe(self) -> Availability:
        if self._availability is None:
            self._availability = self._probe()
        return self._availability

    def _probe(self) -> Availability:
        missing = [n for n in kernel_variants() if not (SPV_DIR / f"{n}.spv").exists()]
        if missing:
            return Availability(False, f"{len(missing)} compiled kernels missing (e.g. {missing[0]}.spv)")
        try:
            importlib.import_module("vulkan")  # raises OSError when libvulkan is absent
        except ImportError:
            return Availability(False, "the vulkan Python binding is not installed (pip install 'llamay[vulkan]')")
        except OSError as exc:
            return Availability(False, f"no Vulkan loader (libvulkan1): {str(exc).splitlines()[0]}")
        try:
            from llamay_backends.vulkan.device import Device

            self._device = Device()
        except Exception as exc:  # the binding raises one class per VkResult
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if type(exc).__name__ == "VkErrorIncompatibleDriver":
                reason = "no Vulkan driver (ICD) found, e.g. apt install mesa-vulkan-drivers"
            return Availability(False, f"no usable Vulkan driver or device: {reason}")
        details = self._device.details()
        device = f"{details['device']} · {details['driver']} · Vulkan {details['api version']}"
        return Availability(True, device=device, details=details)

    @property
    def device(self) -> Any:
        if not self.probe().available:
            raise BackendError(f"backend 'vulkan' is unavailable: {self.probe().reason}")
        return self._device

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> Any:
        from llamay_backends.vulkan.weights import DeviceWeights

        for t in tensors.values():
            if len(t.shape) > 1 and t.type_name not in WEIGHT_TYPES:
                raise BackendError(f"vulkan backend cannot read {t.type_name} ({t.name})")
        return DeviceWeights(self.device, tensors)

    def kv_store(self, spec: KvSpec) -> Any:
        from llamay_backends.vulkan.page_store import VulkanPageStore

        return VulkanPageStore(self.device, spec)

    def compile(self, graph: Graph, weights: Any, store: Any) -> Any:
        from llamay_backends.vulkan.plan import VulkanPlan

        started = time.perf_counter()
        plan = VulkanPlan(self.device, graph, weights, store, MAX_TOKENS_PER_PASS)
        for step in plan.steps:
            self.device.pipeline(step.kernel)
        self.compile_seconds += time.perf_counter() - started
        self._plans.append(plan)
        return plan

    def describe(self) -> dict[str, str]:
        words = "16-bit storage" if self._device is not None and self._device.storage16 else "32-bit words"
        return {"kernels": f"glsl→spir-v ({words})", "matmul": "vulkan in-shader dequant, ggml blocks",
                "gemm": "vulkan dequant-once tiles of 8 tokens", "repack": "off (ggml blocks on device)"}

    def bench_lines(self) -> list[str]:
        if not self._plans:
            return []
        plan = self._plans[-1]
        busy = plan.encode_seconds + plan.execute_seconds
        share = 100.0 * plan.encode_seconds / busy if busy else 0.0
        return [f"decode: {plan.dispatches} dispatches per token ({plan.barriers} barriers), one submission",
                f"cpu encoding {plan.encode_seconds * 1e3:.0f}ms · gpu execution {plan.execute_seconds:.3f}s "
                f"({share:.0f}% encoding)"]
