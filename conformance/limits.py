"""Per-op error limits: normalized mean squared error, sum((a-b)^2) / sum(b^2), against reference.

llama.cpp's test-backend-ops uses 1e-7 for most ops; we keep that wherever a float32 backend
computes the same formula in a different order, and loosen it only where a correct backend is
allowed to compute differently. NaN or Inf in an output never passes, whatever the limit.
"""
from __future__ import annotations

# op -> (limit, why). `attention` cases include the `kv_write` that fills the cache they read.
LIMITS: dict[str, tuple[float, str]] = {
    "embed": (1e-7, "a row lookup plus dequantization: only float rounding of d*q-m may differ"),
    "select_rows": (0.0, "a pure copy of rows: must be bit-exact"),
    "rms_norm": (1e-7, "float32 sums in another order; reference accumulates in float64"),
    "add": (1e-7, "elementwise float32"),
    "mul": (1e-7, "elementwise float32"),
    "scale": (1e-7, "elementwise float32"),
    "silu_mul": (1e-7, "elementwise; exp in float32 is within a few ulp"),
    "gelu_mul": (1e-7, "elementwise; tanh in float32 is within a few ulp (no f16 lookup tables)"),
    "softcap": (1e-7, "elementwise; tanh in float32 is within a few ulp"),
    "rope": (1e-5, "theta = pos * base^(-2i/n) in float32 loses ~pos * 6e-8 rad; at position "
                   "32k that is ~2e-3 rad, NMSE ~4e-6, so 1e-5 admits float32 angles up to 32k "
                   "positions while a wrong base, mode or pairing gives ~1"),
    "matmul": (5e-4, "as llama.cpp: a backend may quantize activations to 8 bits (q8_0/q8_K) "
                     "before the dot product, which costs NMSE ~3e-5; a wrong block decode gives >1e-2"),
    "attention": (5e-4, "as llama.cpp's flash attention: online softmax, exp approximations and "
                        "a different summation order over up to a few hundred positions"),
    "kv_write": (5e-4, "checked through the attention that reads what it wrote"),
    # The family ops (conformance/cases_family.py).
    "rope_table": (1e-5, "as rope: float32 angles over up to 32k positions"),
    "columns": (0.0, "a pure copy of columns: must be bit-exact"),
    "moe": (1e-3, "two quantized matmuls in sequence (gate/up, then down), each allowed matmul's 8-bit "
                  "activations: about twice matmul's error (Q2_K measured 5.8e-4); a wrong expert choice "
                  "or weight gives ~1"),
}


def limit_for(op: str) -> float:
    return LIMITS[op][0]
