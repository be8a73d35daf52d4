"""Compile every CUDA kernel source to PTX with nvcc; a syntax error fails CI without a GPU.

    python -m llamay_backends.cuda.compile_check [--arch compute_90] [--keep DIR]

Exit 0 when every file compiles, or when nvcc is absent (says so); exit 1 on any failure.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from llamay_backends.cuda.kernel_sources import nvcc_command, source_files

ENTRY = re.compile(r"\.visible \.entry (\w+)\(([^)]*)\)", re.S)
PARAM = re.compile(r"\.param \.(\w+)")


def compile_all(out_dir: Path, arch: str = "compute_90") -> tuple[dict[str, Path], dict[str, str]]:
    """PTX path per source that compiled, and nvcc's error text per source that did not."""
    ok, failed = {}, {}
    for src in source_files():
        ptx = out_dir / (src.stem + ".ptx")
        proc = subprocess.run(nvcc_command(src, ptx, arch), capture_output=True, text=True)
        if proc.returncode == 0:
            ok[src.name] = ptx
        else:
            failed[src.name] = (proc.stderr or proc.stdout).strip()
    return ok, failed


def ptx_entries(ptx_text: str) -> dict[str, list[str]]:
    """Kernel name -> PTX parameter types (u64 for pointers and long long, u32 int, f32 float)."""
    return {name: PARAM.findall(params) for name, params in ENTRY.findall(ptx_text)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llamay_backends.cuda.compile_check")
    p.add_argument("--arch", default="compute_90")
    p.add_argument("--keep", type=Path, default=None, help="write the PTX files here")
    args = p.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("cuda compile check: nvcc not found, skipped")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        ok, failed = compile_all(out_dir, args.arch)
        n_kernels = sum(len(ptx_entries(path.read_text())) for path in ok.values())
    for name, error in failed.items():
        print(f"cuda compile check: {name} FAILED\n{error}", file=sys.stderr)
    print(f"cuda compile check: {len(ok)}/{len(ok) + len(failed)} sources, {n_kernels} kernels to PTX ({args.arch})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
