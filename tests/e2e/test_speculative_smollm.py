"""Speculative decoding and constrained output on real models (reference backend)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from llamay_core.engine.sampling import SamplingParams
from llamay_core.speculative import SpeculativeConfig

pytestmark = pytest.mark.model

REPEAT = ("The quarterly report states that revenue grew by 14 percent. The board approved a dividend "
          "of 40 cents per share.\n\nRepeat the sentence above, word for word:\n\n")


def greedy(model, prompt, n, speculative=None):
    gen = model.start_generation(prompt, SamplingParams(), n, speculative=speculative)
    try:
        return list(gen.tokens()), gen.stats
    finally:
        gen.ctx.close()


def test_smollm_drafting_for_itself_equals_plain(smollm_ref):
    plain, _ = greedy(smollm_ref, "The capital of France is", 6)
    spec, stats = greedy(smollm_ref, "The capital of France is", 6, SpeculativeConfig("draft", 3, smollm_ref))
    assert spec == plain
    assert stats.speculative.acceptance > 0.8  # a model agrees with itself, up to batch rounding
    assert smollm_ref.pool.pages_in_use == 0


def test_smollm_ngram_on_a_repeat_prompt(smollm_ref):
    plain, _ = greedy(smollm_ref, REPEAT, 14)
    spec, stats = greedy(smollm_ref, REPEAT, 14, SpeculativeConfig("ngram", draft_max=6))
    assert spec == plain
    s = stats.speculative
    assert s.accepted > 0 and s.target_passes < 14, s.line()


@pytest.mark.slow
def test_smollm_json_schema_output_validates(smollm_ref):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "country": {"enum": ["France", "Spain", "Italy"]}},
              "required": ["city", "country"], "additionalProperties": False}
    text = smollm_ref.generate("The capital of France as JSON:", max_tokens=30, json_schema=schema)
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.slow
def test_qwen_drafted_by_smollm_equals_plain(qwen_path, smollm_path):
    import llamay

    qwen = llamay.load(qwen_path, backend="reference", n_ctx=512, n_seq=2)
    smol = llamay.load(smollm_path, backend="reference", n_ctx=512, n_seq=2)
    prompt = "def fibonacci(n):\n"
    plain, _ = greedy(qwen, prompt, 16)
    spec, stats = greedy(qwen, prompt, 16, SpeculativeConfig("draft", 6, smol))
    assert spec == plain
    assert stats.speculative.drafted > 0


@pytest.fixture(scope="module")
def smollm_cpu(smollm_path):
    import llamay

    return llamay.load(smollm_path, backend="cpu", n_ctx=1024, n_seq=4)


def test_cpu_verification_is_bit_exact(smollm_cpu):
    # The cpu backend computes a token's logits with the same bits alone or among a draft's rows,
    # so a model drafting for itself has every draft accepted, and lookup matches plain exactly.
    plain, _ = greedy(smollm_cpu, REPEAT, 40)
    spec, stats = greedy(smollm_cpu, REPEAT, 40, SpeculativeConfig("draft", 8, smollm_cpu))
    assert spec == plain
    assert stats.speculative.acceptance == 1.0, stats.speculative.line()
    lookup, stats = greedy(smollm_cpu, REPEAT, 40, SpeculativeConfig("ngram"))
    assert lookup == plain
    assert stats.speculative.target_passes < 20, stats.speculative.line()
    assert smollm_cpu.pool.pages_in_use == 0


@pytest.mark.slow
def test_qwen_drafted_by_smollm_equals_plain_on_cpu(qwen_path, smollm_cpu):
    import llamay

    qwen = llamay.load(qwen_path, backend="cpu", n_ctx=512, n_seq=2)
    prompt = "def fibonacci(n):\n"
    plain, _ = greedy(qwen, prompt, 32)
    spec, stats = greedy(qwen, prompt, 32, SpeculativeConfig("draft", 8, smollm_cpu))
    assert spec == plain
    assert stats.speculative.drafted > 0
    lookup, _ = greedy(qwen, prompt, 32, SpeculativeConfig("ngram"))
    assert lookup == plain
