"""Registers the WebGPU backend. Imports nothing heavy: wgpu is imported only when the backend is used."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="webgpu",
        factory="llamay_backends.webgpu.backend:WebGPUBackend",
        priority=35,
        description="WGSL kernels through wgpu-py (Vulkan, Metal, D3D12, GL); GGML blocks dequantized in-shader",
    ))
