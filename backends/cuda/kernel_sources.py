"""The CUDA C sources in kernels/, which kernel lives in which file, and the compile options.

The backend compiles each .cu with NVRTC through `cupy.RawModule`; CI compiles the same files to
PTX with nvcc (compile_check.py), so a syntax error fails CI on a machine without a GPU.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

# Kernel-name prefix -> source file (longest prefix wins).
KERNEL_FILES = {
    "matvec_": "matvec.cu",
    "matmul_tiled_": "matmul_tiled.cu",
    "embed_": "elementwise.cu",
    "add": "elementwise.cu",
    "mul": "elementwise.cu",
    "scale": "elementwise.cu",
    "silu_mul": "elementwise.cu",
    "gelu_mul": "elementwise.cu",
    "softcap": "elementwise.cu",
    "select_rows": "elementwise.cu",
    "rms_norm": "norm_rope.cu",
    "rope": "norm_rope.cu",
    "kv_write_": "paged_attention.cu",
    "attention_": "paged_attention.cu",
}


def source_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))


def file_for(kernel: str) -> str:
    """The .cu file that defines `kernel`."""
    matches = [p for p in KERNEL_FILES if kernel == p or (p.endswith("_") and kernel.startswith(p))]
    if not matches:
        raise KeyError(f"no CUDA source defines kernel {kernel!r}")
    return KERNEL_FILES[max(matches, key=len)]


def read_source(filename: str) -> str:
    return (KERNEL_DIR / filename).read_text()


def cuda_include_dirs() -> list[str]:
    """Directories holding the CUDA headers the kernels include (cuda_fp16.h, mma.h and crt/).

    NVRTC has no built-in copy of them: a toolkit's include/ comes first, then the headers that
    NVIDIA's pip wheels (nvidia-cuda-runtime-cu12, nvidia-cuda-nvcc-cu12) install.
    """
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    dirs = [os.path.join(r, "include") for r in roots if r]
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels

        for base in nvidia.__path__:
            dirs += [os.path.join(base, pkg, "include") for pkg in ("cuda_runtime", "cuda_nvcc", "cuda_nvrtc")]
    except ImportError:
        pass
    seen: list[str] = []
    for d in dirs:  # the wheels split the headers: cuda_fp16.h and mma.h in one, crt/ in another
        has = any(os.path.isfile(os.path.join(d, h)) for h in ("cuda_fp16.h", os.path.join("crt", "mma.h")))
        if has and d not in seen:
            seen.append(d)
    return seen


def nvrtc_options(arch: str | None = None, include_dirs: list[str] | None = None) -> tuple[str, ...]:
    """Options for NVRTC (cupy.RawModule): our .cuh files, then the CUDA headers."""
    dirs = cuda_include_dirs() if include_dirs is None else include_dirs
    opts = ("-I" + str(KERNEL_DIR), *("-I" + d for d in dirs), "--std=c++17")
    return opts + ((f"-arch={arch}",) if arch else ())


def nvcc_command(source: Path, output: Path, arch: str = "compute_90") -> list[str]:
    return ["nvcc", "-ptx", f"-arch={arch}", "-I", str(KERNEL_DIR), "--std=c++17", str(source), "-o", str(output)]
