"""The reference backend against llama.cpp's goldens: teacher-forced top-1 agreement."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from tests.conftest import read_goldens


def teacher_forced_agreement(model, goldens) -> tuple[int, int]:
    agree = total = 0
    for g in goldens:
        full, n = g["full_ids"], len(g["prompt_ids"])
        logits = model.logits(full)
        pred = np.argmax(logits[n - 1:len(full) - 1], axis=-1)
        agree += int((pred == np.asarray(full[n:])).sum())
        total += len(full) - n
    return agree, total


@pytest.mark.model
def test_smollm2_reference_agrees_with_llama_cpp(smollm_ref):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    agree, total = teacher_forced_agreement(smollm_ref, goldens)
    assert agree / total >= 0.97, f"{agree}/{total}"


@pytest.mark.model
@pytest.mark.slow
def test_qwen_reference_agrees_with_llama_cpp(qwen_path):
    goldens = read_goldens("qwen.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    m = llamay.load(qwen_path, backend="reference", n_ctx=512)
    agree, total = teacher_forced_agreement(m, goldens)
    assert agree / total >= 0.97, f"{agree}/{total}"


@pytest.mark.model
def test_prompt_tokenization_matches_goldens(smollm_ref):
    goldens = read_goldens("smollm2.jsonl")
    if not goldens:
        pytest.skip("goldens not present")
    for g in goldens:
        assert smollm_ref.tokenize(g["prompt"], add_special=True, parse_special=True) == g["prompt_ids"], g["id"]
