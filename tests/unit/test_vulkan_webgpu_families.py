"""Families using the graph's extended ops on the GPU-API backends against the reference:
rope_table (Llama 3 rope_freqs, YaRN) and columns (phi3) run on the device, moe on a host
fallback through the graph split."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import llamay
from tests.support.family_gguf import write_family_gguf
from tests.unit.test_family_backends import FAMILIES, IDS

BACKENDS = {"vulkan": "llamay_backends.vulkan.backend:VulkanBackend",
            "webgpu": "llamay_backends.webgpu.backend:WebGPUBackend"}
# case -> the ops that must run off the device
CASES = {"llama-rope-freqs": set(), "llama-yarn": set(), "phi3": set(), "qwen3moe": {"moe"}}


def require(backend: str) -> None:
    module, _, cls = BACKENDS[backend].partition(":")
    availability = getattr(importlib.import_module(module), cls)().probe()
    if not availability.available:
        pytest.skip(f"{backend} unavailable: {availability.reason}")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_family_matches_reference(tmp_path, backend, case):
    require(backend)
    arch, kw = FAMILIES[case]
    path = write_family_gguf(tmp_path / "m.gguf", arch, **kw)
    with llamay.load(path, backend="reference", n_ctx=64) as ref, \
            llamay.load(path, backend=backend, n_ctx=64, ubatch=8) as gpu:
        assert {op for name, ops in gpu.placement() if name != backend for op in ops} == CASES[case]
        # every id's logits: a prefill in passes of 8 tokens, then two one-token decode steps
        a, b = ref.context(), gpu.context()
        np.testing.assert_allclose(b.extend_all(IDS), a.extend_all(IDS), rtol=1e-5, atol=1e-4)
        for tok in (17, 42):
            np.testing.assert_allclose(b.extend([tok]), a.extend([tok]), rtol=1e-5, atol=1e-4)
