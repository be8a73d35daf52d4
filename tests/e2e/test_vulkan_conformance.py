"""`llamay conformance -backend vulkan`, op level and model level on smollm2:135m, on lavapipe in CI.

This is the one full model-level check of the Vulkan backend in the default run (about 1-1.5
minutes on Debian's Mesa 22 lavapipe on 2 cores); it skips where Vulkan is unavailable.
"""
from __future__ import annotations

import pytest


@pytest.mark.model
def test_vulkan_passes_conformance_on_smollm2(smollm_path, capsys):
    from llamay_backends.vulkan.backend import VulkanBackend
    from llamay_core.cli.main import main

    availability = VulkanBackend().probe()
    if not availability.available:
        pytest.skip(f"vulkan unavailable: {availability.reason}")
    code = main(["conformance", "-backend", "vulkan", "-m", str(smollm_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "**vulkan: PASS**" in out
    assert "| kld | PASS |" in out and "| state | PASS |" in out
