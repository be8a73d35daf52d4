"""Registers the cpu backend. Numba is imported only when the backend is created."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="cpu",
        factory="llamay_backends.cpu.backend:CpuBackend",
        priority=50,
        description="Numba kernels reading GGML block formats directly",
    ))
