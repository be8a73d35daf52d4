"""The CUDA backend: CuPy for memory and launches, CUDA C kernels in kernels/, one CUDA graph per decode step.

Nothing here imports CuPy at import time: `probe()` does, and reports why the backend is
unavailable when CuPy, the driver or a device is missing.
"""
