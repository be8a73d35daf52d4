"""The forced AVX2-only kernel tests (tests/unit/test_cpu_isa.py) as a child process started when
the session collects them, so that the child's compiles (~2 minutes on CI's machine) overlap the
rest of the suite: Numba compiles on one core, and the suite is mostly compiles."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_ID = "tests/unit/test_cpu_isa.py::test_avx2_build_matches_reference"
CHILD = pytest.StashKey["KernelTestsChild"]()
# The intrinsics are shared by all formats and each format compiled under AVX2 costs ~10 s of
# CI's time, so one format per way of feeding them: unsigned nibbles with an offset (Q4_0), signed
# bytes (Q8_0), K-quant scales and minimums (Q4_K), the same with a fifth bit plane (Q5_K),
# signed 6-bit with two scales per run (Q6_K), Q6_K's scheme on three-bit fields (Q3_K), and the
# float path's F16. The interleaved int8 kernel (`exactly_the_scheme` in test_cpu_interleaved.py)
# runs for those formats, and its four-token blocks and prompt chunks
# (`decode_bits_across_chunks`). Not the q/k/v loop, the team, nor the compiled decode program:
# they only call these kernels, so their bits hold on any ISA.
FORMATS = ("Q4_0", "Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16")
SELECTION = ("(matmul_q8_matches_reference or matvec_float_matches_reference or exactly_the_scheme "
             "or decode_bits_across_chunks) and (" + " or ".join(f"[{name}" for name in FORMATS) + ")")
FILES = ("tests/unit/test_cpu_kernels.py", "tests/unit/test_cpu_q8_scheme.py", "tests/unit/test_cpu_interleaved.py")


class KernelTestsChild:
    """pytest on the kernel tests in a child process with LLAMAY_CPU_ISA=avx2 and a cache of its
    own (Numba compiles each process's kernels for one target); its output goes to a file, so a
    long report never blocks it on a full pipe."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="llamay-avx2-")
        env = {**os.environ, "LLAMAY_CPU_ISA": "avx2", "NUMBA_CACHE_DIR": self._folder.name}
        self._log = open(Path(self._folder.name) / "pytest.log", "w+")
        self._process = subprocess.Popen([sys.executable, "-m", "pytest", *FILES, "-q", "-p", "no:cacheprovider",
                                          "-k", SELECTION], cwd=REPO, env=env, stdout=self._log,
                                         stderr=subprocess.STDOUT, text=True)

    def result(self, timeout: float = 900) -> tuple[int, str]:
        """(exit code, output), once the child is done."""
        code = self._process.wait(timeout=timeout)
        self._log.seek(0)
        return code, self._log.read()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._log.close()
        self._folder.cleanup()
