"""The WebGPU backend: WGSL kernels run through wgpu-py (Vulkan, Metal, D3D12 or GL underneath)."""
