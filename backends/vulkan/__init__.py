"""Vulkan backend: GGML block weights decoded in GLSL compute shaders, KV pages on the device."""
