"""`llamay ppl` against llama.cpp's anchor, and the CLI's user-facing behaviour."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

GPL3 = Path("/usr/share/common-licenses/GPL-3")
LLAMA_CPP_PPL_SMOLLM2 = 18.3459  # ../shared/anchors/README.md, -c 512, 14 chunks


def llamay_cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "llamay_core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_ppl_within_one_percent_of_llama_cpp(smollm_path):
    if not GPL3.exists():
        pytest.skip("GPL-3 text not on this machine")
    proc = llamay_cli("ppl", "-m", str(smollm_path), "-f", str(GPL3), "-c", "512")
    assert proc.returncode == 0, proc.stderr
    ppl = float(re.search(r"PPL = ([0-9.]+)", proc.stdout).group(1))
    assert "14 chunks" in proc.stdout
    assert abs(ppl - LLAMA_CPP_PPL_SMOLLM2) / LLAMA_CPP_PPL_SMOLLM2 < 0.01, ppl


def test_run_streams_and_prints_stats(smollm_path):
    proc = llamay_cli("run", "-m", str(smollm_path), "-p", "The capital of France is", "-n", "8", "-stats",
                      "-backend", "reference")
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
    assert re.search(r"prompt \d+ tokens in [0-9.]+s \([0-9.]+ tok/s\) · generated 8 in [0-9.]+s "
                     r"\([0-9.]+ tok/s\) · stop: length", proc.stderr)


@pytest.mark.parametrize("args, words", [
    (["run", "-p"], "expected one argument"),
    (["run", "-m", "nosuch:model", "-p", "x"], "unknown model"),
    (["run", "-n", "0", "-p", "x"], "expected a number >= 1"),
    (["run", "-temp", "abc", "-p", "x"], "invalid float"),
    (["run", "-backend", "nosuch", "-p", "x"], "unknown backend"),
    (["pull", "nosuch:model"], "unknown model"),
])
def test_bad_input_is_one_line_exit_2(args, words, smollm_path):
    proc = llamay_cli(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr


def test_version_lists_backends():
    proc = llamay_cli("version")
    assert proc.returncode == 0
    assert "reference" in proc.stdout and "numpy" in proc.stdout and "simd" in proc.stdout
