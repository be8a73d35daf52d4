"""The cpu backend: Numba kernels over GGML block formats."""
