"""The AVX2-only kernel build, forced with LLAMAY_CPU_ISA=avx2 on any x86 machine.

Numba compiles each process's kernels for one target, so the forced build runs in a child
process: there the kernel tests run against gguf's reference, and a freshly compiled int8 dot
is checked to hold AVX2's vpmaddubsw and no AVX-512 (no zmm register, no vpdpbusd).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from llamay_backends.cpu import isa

REPO = Path(__file__).resolve().parents[2]
X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="the AVX2 build exists on x86 only")


def _run(args: list[str], extra_env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAY_CPU_ISA": "avx2", **extra_env}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_avx2_build_has_no_avx512_instructions(tmp_path):
    # a private cache directory: the dots are compiled here, so their assembly is available
    script = (
        "from llamay_backends.cpu import kernels as K\n"
        "from llamay_backends.cpu.kernels import _q8\n"
        "print(sorted(f for f in K.FEATURES if f.startswith('avx')), K.HAS_AVX2, K.HAS_VNNI)\n"
        "import numpy as np\n"
        "w = np.zeros(34, np.uint8); xq = np.zeros(32, np.int8); xa = np.zeros((K.XA_ROWS, 2), np.float32)\n"
        "_q8.qdot_q8_0(w, xq, xa); _q8.qdot_q4_0(w[:18], xq, xa)\n"
        "asm = ''.join(''.join(f.inspect_asm().values()) for f in (_q8.qdot_q8_0, _q8.qdot_q4_0))\n"
        "print('zmm' in asm, 'vpdpbusd' in asm, 'vpmaddubsw' in asm, len(asm) > 1000)\n"
    )
    done = _run(["-c", script], {"NUMBA_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    features, flags = done.stdout.strip().splitlines()
    assert "avx2" in features and "avx512f" not in features
    assert flags == "False False True True", done.stdout


def test_avx2_build_matches_reference(request):
    # the per-row int8 kernel (matmul_q8) and the float one, the int8 one also against its exact
    # scheme, where vpmaddubsw's saturation or the sign trick would show; the grouped and the
    # interleaved int8 decode kernels against the scheme (formats: tests/support/avx2_child.py).
    # The child started when the session collected this test (tests/conftest.py).
    from tests.support.avx2_child import CHILD, KernelTestsChild

    child = request.config.stash.get(CHILD, None)
    if child is None:  # selected some other way than collection (a plugin): start it here
        child = request.config.stash[CHILD] = KernelTestsChild()
    code, out = child.result()
    assert code == 0, out[-5000:]
    assert " passed" in out and " failed" not in out


def test_level_names_and_bad_choice(monkeypatch):
    assert isa.describe({"avx2", "fma", "avx512f", "avx512vnni", "avx512vl"}) == "avx512+vnni"
    assert isa.describe({"avx2", "fma", "avx512f"}) == "avx512"
    assert isa.describe({"avx2", "avxvnni"}) == "avx2+vnni"
    assert isa.describe({"avx2", "fma"}) == "avx2"
    monkeypatch.setenv("LLAMAY_CPU_ISA", "sse9")
    with pytest.raises(ValueError, match="LLAMAY_CPU_ISA='sse9': expected one of auto, avx2"):
        isa.requested()


def test_blas_note_says_when_a_forced_avx2_run_keeps_avx512_gemm():
    assert isa.blas_note(None, "avx2") == "BLAS sgemm"
    assert isa.blas_note("Haswell", "avx2") == "BLAS sgemm (OpenBLAS Haswell)"
    assert isa.blas_note("SkylakeX", "auto") == "BLAS sgemm (OpenBLAS SkylakeX)"
    assert "OPENBLAS_CORETYPE=Haswell" in isa.blas_note("SkylakeX", "avx2")


def test_blas_core_follows_openblas_coretype():
    if isa.blas_core() is None:
        pytest.skip("NumPy's BLAS here is not an OpenBLAS that names its core")
    code = "from llamay_backends.cpu import isa; print(isa.blas_core())"
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Haswell"
