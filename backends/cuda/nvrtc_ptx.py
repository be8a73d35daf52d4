"""CUDA C to PTX with NVRTC through ctypes: no GPU, no driver, no CuPy and no nvcc needed.

The backend compiles with NVRTC at run time (through CuPy); this calls the same library with
the same options, so CI can compile every kernel on a machine without a GPU. The library comes
from a toolkit or from NVIDIA's pip wheel nvidia-cuda-nvrtc-cu12 (headers: nvidia-cuda-runtime-cu12
and nvidia-cuda-nvcc-cu12).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from pathlib import Path


def find_nvrtc() -> str | None:
    """Path (or loader name) of libnvrtc: the pip wheel's, a toolkit's, or the system's."""
    candidates = []
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels

        for base in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "cuda_nvrtc", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
    for path in candidates:
        if ".alt." not in path and "builtins" not in path:
            return path
    return ctypes.util.find_library("nvrtc")


class Nvrtc:
    """The five NVRTC calls a compile needs."""

    def __init__(self, library: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(status).decode()}")

    def ptx(self, source: Path, options: tuple[str, ...]) -> tuple[str | None, str]:
        """(PTX text, "") when `source` compiles, else (None, NVRTC's log)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.read_bytes(), source.name.encode(), 0,
                                           None, None), "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            log = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            if status != 0:
                return None, log.value.decode(errors="replace").strip() or lib.nvrtcGetErrorString(status).decode()
            self._check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            ptx = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx.value.decode(), ""
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
