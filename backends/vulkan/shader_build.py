"""The kernels: which GLSL source and defines make each .spv, and how glslc builds them.

The .spv files are committed so a user needs no shader compiler; `python -m
llamay_backends.vulkan.shader_build` rebuilds them, and a test fails when one is stale.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SHADER_DIR = Path(__file__).parent / "shaders"
SPV_DIR = Path(__file__).parent / "spv"

# GGML weight types with an in-shader decoder (quant.glsl).
WEIGHT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K", "F16", "F32")
GLSLC_FLAGS = ("-O", "--target-env=vulkan1.1")


def kernel_variants() -> dict[str, tuple[str, tuple[str, ...]]]:
    """spv name -> (source file, preprocessor defines)."""
    variants: dict[str, tuple[str, tuple[str, ...]]] = {}
    for wtype in WEIGHT_TYPES:
        for kernel in ("matmul", "get_rows"):
            variants[f"{kernel}_{wtype}"] = (f"{kernel}.comp", (wtype,))
            # Devices without 16-bit storage read the same bytes as 32-bit words.
            variants[f"{kernel}_{wtype}_w32"] = (f"{kernel}.comp", (wtype, "WORDS32"))
    for kernel in ("rms_norm", "elementwise", "rope", "select_rows", "columns"):
        variants[kernel] = (f"{kernel}.comp", ())
    variants["rope_table"] = ("rope.comp", ("ROPE_TABLE",))
    for kernel in ("kv_write", "attention"):
        variants[f"{kernel}_f32"] = (f"{kernel}.comp", ())
        variants[f"{kernel}_f16"] = (f"{kernel}.comp", ("KV_F16",))
    return variants


def compile_all(out_dir: Path, glslc: str | None = None) -> list[Path]:
    """Compile every variant into out_dir; raises CalledProcessError with glslc's message."""
    glslc = glslc or shutil.which("glslc")
    if glslc is None:
        raise FileNotFoundError("glslc not found (apt install glslc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (source, defines) in sorted(kernel_variants().items()):
        out = out_dir / f"{name}.spv"
        cmd = [glslc, *GLSLC_FLAGS, *(f"-D{d}" for d in defines), str(SHADER_DIR / source), "-o", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        written.append(out)
    return written


def main() -> int:
    try:
        written = compile_all(SPV_DIR)
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(exc.stderr)
        return 1
    print(f"wrote {len(written)} kernels to {SPV_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
