"""Which x86 instruction level the cpu backend's kernels are compiled for.

Numba compiles for the host CPU, and `kernels/_simd.py` picks its intrinsics (VNNI's
vpdpbusd, AVX2's vpmaddubsw) from the features of that target. `LLAMAY_CPU_ISA=avx2` makes
Numba target an AVX2-only CPU (haswell: AVX2, FMA, F16C; no AVX-512, no VNNI) on any x86
machine, so the AVX2 path is a real, separately compiled build (Numba caches it apart from
the host build) that tests and benchmarks can run where AVX-512 exists. It must take effect
before Numba compiles anything in the process: `apply()` runs when `kernels` is imported.

Prompts also run BLAS's sgemm, whose kernels OpenBLAS picks by CPU when it loads (with NumPy,
before any of this runs): `OPENBLAS_CORETYPE=Haswell` in the environment at start forces its
AVX2 kernels. `blas_core()` says which it took; the bench header shows it, so a forced-AVX2
prefill figure says whether its GEMM was AVX2 too.
"""
from __future__ import annotations

import os

CHOICES = ("auto", "avx2")
ENV = "LLAMAY_CPU_ISA"
# haswell's own features, spelled out: with NUMBA_CPU_FEATURES set, `_simd` reads the target's
# features from it instead of asking the host
_HASWELL_FEATURES = ("+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,"
                     "+pclmul,+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave")


def requested() -> str:
    """The level asked for by LLAMAY_CPU_ISA (auto when unset)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(CHOICES)}")
    return value


def apply() -> None:
    """Point Numba's target at the requested level (nothing to do for auto)."""
    if requested() == "avx2":
        os.environ["NUMBA_CPU_NAME"] = "haswell"
        os.environ["NUMBA_CPU_FEATURES"] = _HASWELL_FEATURES
        from numba.core import config

        config.reload_config()


# OpenBLAS cores whose sgemm kernels use AVX-512 (its Zen and Haswell cores use AVX2)
AVX512_BLAS_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def blas_core() -> str | None:
    """The CPU core OpenBLAS chose its kernels for in this process (SkylakeX, Haswell, Zen...),
    or None where NumPy's BLAS is not an OpenBLAS that says."""
    import numpy  # noqa: F401  (loads the BLAS that threadpoolctl finds among the loaded libraries)
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and lib.get("architecture"):
            return str(lib["architecture"])
    return None


def blas_note(core: str | None, level: str) -> str:
    """What the bench header says of the GEMM's BLAS kernels at kernel level `level`."""
    if core is None:
        return "BLAS sgemm"
    note = f"BLAS sgemm (OpenBLAS {core})"
    if level == "avx2" and core.lower() in AVX512_BLAS_CORES:
        note += ", AVX-512 kernels: OPENBLAS_CORETYPE=Haswell at start makes them AVX2 too"
    return note


def describe(features: set[str]) -> str:
    """A short name for a target's kernel level: avx512+vnni, avx512, avx2+vnni, avx2, ..."""
    if "avx512f" in features:
        level = "avx512"
    elif "avx2" in features:
        level = "avx2"
    elif "neon" in features:
        level = "neon"
    else:
        level = "generic"
    if ("avx512vnni" in features and level == "avx512") or "avxvnni" in features:
        level += "+vnni"
    return level
