"""Registers the Vulkan backend. Imports nothing heavy: the binding loads only when asked for."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="vulkan",
        factory="llamay_backends.vulkan.backend:VulkanBackend",
        priority=40,
        description="Vulkan compute: GLSL kernels decoding GGML blocks on the device; runs on lavapipe too",
    ))
