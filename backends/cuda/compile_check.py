"""Compile every CUDA kernel source to PTX; a syntax error fails CI without a GPU.

    python -m llamay_backends.cuda.compile_check [--arch compute_90] [--keep DIR] [--compiler auto|nvcc|nvrtc]

The compiler is nvcc when it is on PATH, else NVRTC (the library the backend compiles with at
run time; `pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12`
brings it and the headers, no GPU needed). Exit 0 when every file compiles; exit 1 on any
failure, and when there is no compiler while CI is set (CI=true): CI must not pass unchecked.
Elsewhere a missing compiler is reported and skipped (exit 0).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from llamay_backends.cuda.kernel_sources import nvcc_command, nvrtc_options, source_files
from llamay_backends.cuda.nvrtc_ptx import Nvrtc, find_nvrtc

ENTRY = re.compile(r"\.visible \.entry (\w+)\(([^)]*)\)", re.S)
PARAM = re.compile(r"\.param \.(\w+)")


def pick_compiler(wanted: str = "auto") -> str | None:
    """"nvcc", "nvrtc" or None (neither found); `wanted` forces one when it is there."""
    have_nvcc = shutil.which("nvcc") is not None
    have_nvrtc = find_nvrtc() is not None
    if wanted == "nvcc":
        return "nvcc" if have_nvcc else None
    if wanted == "nvrtc":
        return "nvrtc" if have_nvrtc else None
    return "nvcc" if have_nvcc else "nvrtc" if have_nvrtc else None


def compile_all(out_dir: Path, arch: str = "compute_90",
                compiler: str = "nvcc") -> tuple[dict[str, Path], dict[str, str]]:
    """PTX path per source that compiled, and the compiler's error text per source that did not."""
    ok, failed = {}, {}
    nvrtc = Nvrtc(find_nvrtc() or "libnvrtc.so") if compiler == "nvrtc" else None
    for src in source_files():
        ptx = out_dir / (src.stem + ".ptx")
        if nvrtc is not None:
            text, error = nvrtc.ptx(src, nvrtc_options(arch))
            if text is not None:
                ptx.write_text(text)
        else:
            proc = subprocess.run(nvcc_command(src, ptx, arch), capture_output=True, text=True)
            error = "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()
        if error:
            failed[src.name] = error
        else:
            ok[src.name] = ptx
    return ok, failed


def ptx_entries(ptx_text: str) -> dict[str, list[str]]:
    """Kernel name -> PTX parameter types (u64 for pointers and long long, u32 int, f32 float)."""
    return {name: PARAM.findall(params) for name, params in ENTRY.findall(ptx_text)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llamay_backends.cuda.compile_check")
    p.add_argument("--arch", default="compute_90")
    p.add_argument("--keep", type=Path, default=None, help="write the PTX files here")
    p.add_argument("--compiler", choices=("auto", "nvcc", "nvrtc"), default="auto")
    args = p.parse_args(argv)
    compiler = pick_compiler(args.compiler)
    if compiler is None:
        wanted = "nvcc or NVRTC" if args.compiler == "auto" else args.compiler
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            print(f"cuda compile check: FAILED: no CUDA compiler ({wanted}) in CI; install one with "
                  "pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12", file=sys.stderr)
            return 1
        print(f"cuda compile check: no CUDA compiler ({wanted}) found, skipped")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        ok, failed = compile_all(out_dir, args.arch, compiler)
        n_kernels = sum(len(ptx_entries(path.read_text())) for path in ok.values())
    for name, error in failed.items():
        print(f"cuda compile check: {name} FAILED\n{error}", file=sys.stderr)
    print(f"cuda compile check: {len(ok)}/{len(ok) + len(failed)} sources, {n_kernels} kernels to PTX "
          f"({args.arch}, {compiler})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
