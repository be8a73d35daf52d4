"""The MSL kernels in kernels/, kept in one place, and which kernels implement which graph op.

Metal compiles a library from one source string, so the .metal files are joined in name order.
"""
from __future__ import annotations

import re
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
FORMATS = {"F32": "f32", "F16": "f16", "Q4_0": "q4_0", "Q4_1": "q4_1", "Q5_0": "q5_0", "Q8_0": "q8_0",
           "Q4_K": "q4_k", "Q6_K": "q6_k"}

# Graph op -> the kernel functions that implement it ("{fmt}" = one per weight format).
OP_KERNELS = {
    "embed": ("embed_{fmt}",),
    "rms_norm": ("rms_norm",),
    "matmul": ("matvec_{fmt}", "matmul_tiled_{fmt}"),
    "add": ("add",),
    "mul": ("mul",),
    "scale": ("scale",),
    "rope": ("rope",),
    "kv_write": ("kv_write",),
    "attention": ("attention",),
    "silu_mul": ("silu_mul",),
    "gelu_mul": ("gelu_mul",),
    "softcap": ("softcap",),
    "select_rows": ("select_rows",),
}


def library_source() -> str:
    return "\n".join(p.read_text() for p in sorted(KERNEL_DIR.glob("*.metal")))


def kernel_names(op: str) -> list[str]:
    names = []
    for pattern in OP_KERNELS[op]:
        names += [pattern.format(fmt=f) for f in FORMATS.values()] if "{fmt}" in pattern else [pattern]
    return names


def defined_kernels(source: str | None = None) -> set[str]:
    """Kernel names the source defines, with the per-format macros expanded."""
    text = source if source is not None else library_source()
    names = set(re.findall(r"^kernel void (\w+)\(", text, re.M))
    for stem in re.findall(r"kernel void (\w+)_##name\(", text):
        names |= {f"{stem}_{f}" for f in re.findall(r"X\((\w+)\)", text.split("LLAMAY_FOR_EACH_FORMAT(X)")[1].splitlines()[0])}
    return names
