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


def test_avx2_build_matches_reference():
    # the per-row int8 kernel (matmul_q8) and the float one, the int8 one also against its exact
    # scheme, where vpmaddubsw's saturation or the sign trick would show; the grouped int8 decode
    # kernel against the scheme. The intrinsics are shared by all formats and each format compiled
    # under AVX2 costs ~10 s of CI's budget, so one format per way of feeding them: unsigned nibbles
    # with an offset (Q4_0), a fifth bit and a minimum (Q5_1), signed bytes (Q8_0), 2-bit planes
    # (Q2_K), K-quant scales and minimums (Q4_K), signed 6-bit with two scales per run (Q6_K), and
    # the float path's F16. The interleaved int8 kernel (`exactly_the_scheme` in
    # test_cpu_interleaved.py) runs for those formats, and its four-token blocks and prompt
    # chunks (`decode_bits_across_chunks`) for Q5_1, Q4_K, Q6_K and Q8_0. Not the q/k/v loop
    # nor the compiled decode program: one `_tasks` serves one to three weights, and the program
    # only calls these kernels, so their bits hold on any ISA (each would cost CI a minute here).
    formats = " or ".join(f"[{name}" for name in ("Q4_0", "Q5_1", "Q8_0", "Q2_K", "Q4_K", "Q6_K", "F16"))
    selection = (f"(matmul_q8_matches_reference or matvec_float_matches_reference or exactly_the_scheme "
                 f"or decode_bits_across_chunks) "
                 f"and ({formats})")
    files = ["tests/unit/test_cpu_kernels.py", "tests/unit/test_cpu_q8_scheme.py", "tests/unit/test_cpu_interleaved.py"]
    done = _run(["-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-k", selection], {})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_level_names_and_bad_choice(monkeypatch):
    assert isa.describe({"avx2", "fma", "avx512f", "avx512vnni", "avx512vl"}) == "avx512+vnni"
    assert isa.describe({"avx2", "fma", "avx512f"}) == "avx512"
    assert isa.describe({"avx2", "avxvnni"}) == "avx2+vnni"
    assert isa.describe({"avx2", "fma"}) == "avx2"
    monkeypatch.setenv("LLAMAY_CPU_ISA", "sse9")
    with pytest.raises(ValueError, match="LLAMAY_CPU_ISA='sse9': expected one of auto, avx2"):
        isa.requested()
