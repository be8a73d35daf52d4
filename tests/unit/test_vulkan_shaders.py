"""The committed .spv kernels are what glslc makes of the sources; no driver means a clear reason."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from llamay_backends.vulkan.shader_build import SPV_DIR, compile_all, kernel_variants


@pytest.mark.skipif(shutil.which("glslc") is None, reason="glslc not installed")
def test_committed_spirv_is_not_stale(tmp_path):
    compile_all(tmp_path)
    stale = [name for name in kernel_variants()
             if not (SPV_DIR / f"{name}.spv").exists()
             or (SPV_DIR / f"{name}.spv").read_bytes() != (tmp_path / f"{name}.spv").read_bytes()]
    assert not stale, f"stale kernels {stale}: run python -m llamay_backends.vulkan.shader_build"


def test_no_stray_spirv_files():
    assert {p.stem for p in SPV_DIR.glob("*.spv")} == set(kernel_variants())


def test_unavailable_without_a_driver_says_why():
    """With no ICD the backend reports a reason instead of crashing (checked in a clean process)."""
    code = ("from llamay_backends.vulkan.backend import VulkanBackend\n"
            "a = VulkanBackend().probe()\n"
            "print(a.available, a.reason)\n")
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json", VK_DRIVER_FILES="/nonexistent/icd.json")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    available, reason = out.stdout.strip().split(" ", 1)
    assert available == "False"
    assert "driver" in reason or "loader" in reason or "binding" in reason, reason


def test_registered_and_cheap_to_import():
    """The plugin module names a factory string and imports no binding."""
    code = ("import sys, llamay_backends.vulkan.plugin, llamay_backends.vulkan.backend\n"
            "print('vulkan' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
