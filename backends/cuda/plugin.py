"""Registers the CUDA backend. Imports nothing heavy: the factory is a string and CuPy loads on use."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="cuda",
        factory="llamay_backends.cuda.backend:CudaBackend",
        priority=90,
        description="NVIDIA GPUs through CuPy: GGML blocks read in place, CUDA C kernels, CUDA graphs for decode",
    ))
