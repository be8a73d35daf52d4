"""Each family and weight type against llama.cpp on the same tiny random GGUF.

Teacher-forced over 300 positions: per-position logits NMSE, top-1 agreement, and perplexity
computed the way llama-perplexity does (llamay's `perplexity` on one side, the same chunks'
llama.cpp logits through the same formula on the other). llama.cpp comes from the `test` extra
(llama-cpp-py-sync, llama.cpp b11739) or llama-cpp-python; see tests/support/llamacpp_reference.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import llamay
from llamay_core.engine.perplexity import log_softmax_nll, perplexity
from tests.support.family_gguf import write_family_gguf
from tests.support.llamacpp_reference import BINDING, MISSING, LlamaCpp

if BINDING is None:
    pytest.skip(MISSING, allow_module_level=True)

N_POSITIONS = 300
PPL_CTX = 128  # llama-perplexity's -c
PPL_SAMPLED = 200  # tokens sampled for the perplexity text; it tokenizes back into 2-4 chunks
CASES = {
    "llama": ("llama", "F32", {}),
    "llama-rope-freqs": ("llama", "F32", dict(rope_freqs=True)),
    "llama-linear": ("llama", "F32", dict(meta={"rope.scaling.type": "linear", "rope.scaling.factor": 4.0})),
    "llama-yarn": ("llama", "F32", dict(meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                              "rope.scaling.original_context_length": 64})),
    "llama-moe": ("llama", "F32", dict(moe=True)),  # Mixtral's layout
    "mistral3-yarn": ("mistral3", "F32", dict(meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 8.0,
                                                   "rope.scaling.original_context_length": 128,
                                                   "rope.scaling.yarn_beta_fast": 16.0,
                                                   "rope.scaling.yarn_log_multiplier": 1.0})),
    "qwen3": ("qwen3", "F32", dict(head_dim=32)),
    "qwen3moe": ("qwen3moe", "F32", dict(head_dim=32)),
    "olmoe": ("olmoe", "F32", dict(n_kv=4)),  # llama.cpp's olmoe is multi-head (k norm of n_embd)
    "phi3": ("phi3", "F32", dict(n_rot=12)),
    "phi3-rope-factors": ("phi3", "F32", dict(n_rot=12, rope_freqs=True,
                                              meta={"rope.scaling.original_context_length": 1024})),
    "granite": ("granite", "F32", {}),
    "olmo2": ("olmo2", "F32", {}),
    # Quantized files: smaller projections, so llama.cpp's 8-bit activations are not amplified
    # layer after layer into a perplexity gap that says nothing about the weights.
    "llama-Q8_0": ("llama", "Q8_0", dict(proj_gain=0.5, tied=False)),
    "llama-IQ4_NL": ("llama", "IQ4_NL", dict(d=256, ff=256, proj_gain=0.5, tied=False)),
    "llama-IQ4_XS": ("llama", "IQ4_XS", dict(d=256, ff=256, proj_gain=0.5, tied=False)),
    "llama-MXFP4": ("llama", "MXFP4", dict(proj_gain=0.5, tied=False)),
}
# ((worst position, mean over positions) NMSE, top-1 agreement). F32 weights: llama.cpp and
# llamay differ only in float32 summation order and rope angles (measured worst ~1e-11).
# Quantized: llama.cpp's cpu multiplies with activations quantized to 8 bits (measured worst
# 6e-4 for IQ4_XS, 1.4e-4 IQ4_NL, 4e-5 Q8_0), which flips the top-1 of a few near-ties.
QUANT = ((2e-3, 5e-4), 0.97)
LIMITS = {"F32": ((1e-5, 1e-6), 0.99), "Q8_0": QUANT, "IQ4_NL": QUANT, "IQ4_XS": QUANT, "MXFP4": QUANT}


def llamacpp_ppl(llm: LlamaCpp, tokens: list[int], n_ctx: int, bos: int | None) -> float:
    """llama-perplexity's estimate: chunks of n_ctx from an empty cache, the second half scored."""
    nll = []
    for i in range(len(tokens) // n_ctx):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if bos is not None:
            chunk[0] = bos
        logits = llm.logits(chunk)
        first = n_ctx // 2
        nll.append(log_softmax_nll(logits[first:n_ctx - 1], np.asarray(chunk[first + 1:n_ctx])))
    return math.exp(float(np.concatenate(nll).mean()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_matches_llamacpp(tmp_path, case):
    worst, mean, agree, ppl, reference_ppl = measure(tmp_path, case)
    (worst_limit, mean_limit), top1 = LIMITS[CASES[case][1]]
    assert worst < worst_limit, f"worst position NMSE {worst:.2e}"
    assert mean < mean_limit, f"mean NMSE {mean:.2e}"
    assert agree >= top1, f"top-1 agreement {agree:.3f}"
    assert abs(ppl / reference_ppl - 1) < 0.01, (ppl, reference_ppl)


def measure(tmp_path, case: str) -> tuple[float, float, float, float, float]:
    """(worst position NMSE, mean NMSE, top-1 agreement, llamay's ppl, llama.cpp's ppl) of `case`."""
    arch, weight_type, kw = CASES[case]
    path = write_family_gguf(tmp_path / f"{case}.gguf", arch, weight_type=weight_type, **kw)
    ids = [int(i) for i in np.random.default_rng(7).integers(0, 263, N_POSITIONS)]
    model = llamay.load(path, backend="reference", n_ctx=512)
    ours = model.logits(ids).astype(np.float64)
    # Text the model sampled: on English a random model's perplexity is ~1e20, where 1% says nothing.
    text = model.generate("The ", max_tokens=PPL_SAMPLED, temperature=1.0, seed=0, ignore_eos=True)
    ppl = perplexity(model, text, n_ctx=PPL_CTX).ppl
    tokens = model.tokenize(text, add_special=True, parse_special=False)
    assert len(tokens) >= 2 * PPL_CTX, f"{len(tokens)} tokens: too few for two perplexity chunks"
    bos = model.tokenizer.bos_id if model.tokenizer.add_bos else None
    with LlamaCpp(path, n_ctx=512) as llm:
        theirs = llm.logits(ids)
        reference_ppl = llamacpp_ppl(llm, tokens, PPL_CTX, bos)  # each chunk from an empty cache
    per_position = ((ours - theirs) ** 2).sum(1) / (theirs ** 2).sum(1)
    agree = float((ours.argmax(1) == theirs.argmax(1)).mean())
    return float(per_position.max()), float(per_position.mean()), agree, ppl, reference_ppl
