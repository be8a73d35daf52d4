"""WGSL sources assembled from shaders/ and compiled into pipelines, once per device."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

SHADERS = Path(__file__).with_name("shaders")
WEIGHT_KERNELS = ("matmul", "embed")  # kernels that read GGML blocks: one pipeline per weight type
TYPE_SNIPPETS = {"Q4_K": ("kquant", "q4_k"), "Q5_K": ("kquant", "q5_k")}


@lru_cache(maxsize=None)
def read_shader(name: str) -> str:
    return (SHADERS / f"{name}.wgsl").read_text()


def kernel_source(kernel: str, type_name: str | None = None) -> str:
    """The full WGSL module: the pass table, the weight type's dequantizer (if any), the kernel."""
    parts = [read_shader("pass")]
    if kernel in WEIGHT_KERNELS:
        if type_name is None:
            raise ValueError(f"kernel {kernel} needs a weight type")
        parts.append(read_shader("types/common"))
        for snippet in TYPE_SNIPPETS.get(type_name, (type_name.lower(),)):
            parts.append(read_shader(f"types/{snippet}"))
    parts.append(read_shader(kernel))
    return "\n".join(parts)


class Pipelines:
    """Compute pipelines by (kernel, weight type), built on first use and kept for the device."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._cache: dict[tuple[str, str | None], Any] = {}

    def get(self, kernel: str, type_name: str | None = None) -> Any:
        key = (kernel, type_name)
        pipeline = self._cache.get(key)
        if pipeline is None:
            label = f"{kernel}_{type_name}" if type_name else kernel
            module = self.device.create_shader_module(label=label, code=kernel_source(kernel, type_name))
            pipeline = self.device.create_compute_pipeline(
                label=label, layout="auto", compute={"module": module, "entry_point": "main"})
            self._cache[key] = pipeline
        return pipeline
