"""smollm2:135m end to end on webgpu: greedy tokens equal reference; teacher-forced agreement
with llama.cpp's goldens. On lavapipe a decode step takes ~2 s, so the default run is short."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_core.engine.quick_check import greedy_ids
from tests.conftest import read_goldens
from tests.e2e.test_reference_goldens import teacher_forced_agreement


@pytest.fixture(scope="module")
def smollm_webgpu(smollm_path):
    from llamay_backends.webgpu.backend import WebGPUBackend

    availability = WebGPUBackend().probe()
    if not availability.available:
        pytest.skip(f"webgpu unavailable: {availability.reason}")
    return llamay.load(smollm_path, backend="webgpu", n_ctx=256)


@pytest.mark.model
def test_greedy_tokens_equal_reference(smollm_webgpu, smollm_ref):
    ids = smollm_ref.tokenize("The capital of France is", add_special=True, parse_special=True)
    assert greedy_ids(smollm_webgpu, ids, 3) == greedy_ids(smollm_ref, ids, 3)


@pytest.mark.model
def test_teacher_forced_on_the_shortest_golden(smollm_webgpu, smollm_ref):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    g = min(goldens, key=lambda g: len(g["full_ids"]))
    full, n = g["full_ids"], len(g["prompt_ids"])
    got = smollm_webgpu.logits(full).argmax(-1)
    assert (got == smollm_ref.logits(full).argmax(-1)).mean() >= 0.99
    assert (got[n - 1:-1] == np.asarray(full[n:])).mean() >= 0.9


@pytest.mark.model
@pytest.mark.slow
def test_teacher_forced_agreement_on_all_goldens(smollm_webgpu):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    agree, total = teacher_forced_agreement(smollm_webgpu, goldens)
    assert agree / total >= 0.99, f"{agree}/{total}"
