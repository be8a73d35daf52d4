"""smollm2:135m on the Vulkan backend: greedy tokens equal the reference's; goldens agree.

On Debian's Mesa 22 lavapipe a decode step takes 0.3-0.7 s, so these are marked slow: the default
run checks the model through `llamay conformance` (test_vulkan_conformance.py).
"""
from __future__ import annotations

import pytest

import llamay
from llamay_core.engine.quick_check import greedy_ids
from tests.conftest import read_goldens
from tests.e2e.test_reference_goldens import teacher_forced_agreement


@pytest.fixture(scope="module")
def smollm_vk(smollm_path):
    from llamay_backends.vulkan.backend import VulkanBackend

    availability = VulkanBackend().probe()
    if not availability.available:
        pytest.skip(f"vulkan unavailable: {availability.reason}")
    return llamay.load(smollm_path, backend="vulkan", n_ctx=256)


@pytest.mark.model
@pytest.mark.slow
def test_greedy_tokens_equal_reference(smollm_vk, smollm_ref):
    goldens = read_goldens("smollm2.jsonl")
    prompt = goldens[0]["prompt_ids"] if goldens else smollm_ref.tokenize("Once upon a time, there was")
    assert greedy_ids(smollm_vk, prompt, 4) == greedy_ids(smollm_ref, prompt, 4)


@pytest.mark.model
@pytest.mark.slow
def test_teacher_forced_agreement_on_one_golden(smollm_vk):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    g = dict(goldens[0])
    g["full_ids"] = g["full_ids"][:len(g["prompt_ids"]) + 16]
    agree, total = teacher_forced_agreement(smollm_vk, [g])
    assert agree / total >= 0.99, f"{agree}/{total}"


@pytest.mark.model
@pytest.mark.slow
def test_teacher_forced_agreement_on_all_goldens(smollm_vk):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    agree, total = teacher_forced_agreement(smollm_vk, goldens)
    assert agree / total >= 0.99, f"{agree}/{total}"
