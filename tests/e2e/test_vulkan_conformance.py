"""`llamay conformance -backend vulkan`, op level and model level on smollm2:135m, on lavapipe in CI.

About 1-1.5 minutes on Debian's Mesa 22 lavapipe on 2 cores, so it is marked slow: `.ci/run`'s
conformance step (`llamay conformance -backend all ... -require vulkan,webgpu`) runs the same check
and fails when Vulkan is missing, where this test would skip.
"""
from __future__ import annotations

import pytest


@pytest.mark.model
@pytest.mark.slow
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
