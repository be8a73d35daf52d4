"""The only module that touches CuPy: modules, kernels, a stream, events and host copies.

The executor talks to this small surface, so tests drive it with a recording fake on NumPy.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from llamay_backends.cuda import kernel_sources


class CupyRuntime:
    """One device, one non-blocking stream; CUDA C modules compiled on first use by NVRTC."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.xp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[str, Any] = {}
        self._functions: dict[str, Any] = {}
        self.compile_seconds = 0.0
        self.module_errors: dict[str, str] = {}

    def module(self, filename: str) -> Any:
        mod = self._modules.get(filename)
        if mod is None:
            t0 = time.perf_counter()
            mod = self.cupy.RawModule(code=kernel_sources.read_source(filename),
                                      options=kernel_sources.nvrtc_options())
            mod.compile()
            self.compile_seconds += time.perf_counter() - t0
            self._modules[filename] = mod
        return mod

    def can_compile(self, filename: str) -> bool:
        """Compile a module now; False (with the reason kept in module_errors) if NVRTC refuses it."""
        try:
            self.module(filename)
            return True
        except Exception as exc:  # CompileException or a missing header: the caller falls back
            self.module_errors[filename] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return False

    def function(self, kernel: str) -> Any:
        fn = self._functions.get(kernel)
        if fn is None:
            fn = self.module(kernel_sources.file_for(kernel)).get_function(kernel)
            self._functions[kernel] = fn
        return fn

    def launch(self, fn: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
        fn(grid, block, args)  # on the current stream: the executor enters `self.stream` around launches

    def null_pointer(self) -> Any:
        return np.uint64(0)  # packed as an 8-byte zero: a NULL pointer parameter (PTX .u64)

    def to_host(self, array: Any) -> np.ndarray:
        return self.cupy.asnumpy(array, stream=self.stream)

    def upload(self, device: Any, host: np.ndarray) -> None:
        device.set(host, stream=self.stream)

    def event(self) -> Any:
        return self.cupy.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def elapsed(self, start: Any, end: Any) -> float:
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / 1000.0

    def synchronize(self) -> None:
        self.stream.synchronize()
