"""Each family and weight type against llama.cpp on the same tiny random GGUF.

Teacher-forced over 300 positions: per-position logits NMSE, top-1 agreement, and perplexity
computed the way llama-perplexity does (llamay's `perplexity` on one side, the same chunks'
llama.cpp logits through the same formula on the other). Needs llama-cpp-python (the `dev`
extra, built from source); skipped without it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import llamay
from llamay_core.engine.perplexity import log_softmax_nll, perplexity
from tests.support.family_gguf import write_family_gguf

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[dev]')")

N_POSITIONS = 300
TEXT = ("The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun. " * 8)[:640]
CASES = {
    "llama": ("llama", "F32", {}),
    "llama-rope-freqs": ("llama", "F32", dict(rope_freqs=True)),
    "llama-linear": ("llama", "F32", dict(meta={"rope.scaling.type": "linear", "rope.scaling.factor": 4.0})),
    "llama-yarn": ("llama", "F32", dict(meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                              "rope.scaling.original_context_length": 64})),
    "mistral3-yarn": ("mistral3", "F32", dict(meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 8.0,
                                                   "rope.scaling.original_context_length": 128,
                                                   "rope.scaling.yarn_beta_fast": 16.0,
                                                   "rope.scaling.yarn_log_multiplier": 1.0})),
    "qwen3": ("qwen3", "F32", dict(head_dim=32)),
    "qwen3moe": ("qwen3moe", "F32", dict(head_dim=32)),
    "olmoe": ("olmoe", "F32", {}),
    "phi3": ("phi3", "F32", dict(n_rot=12)),
    "phi3-rope-factors": ("phi3", "F32", dict(n_rot=12, rope_freqs=True,
                                              meta={"rope.scaling.original_context_length": 1024})),
    "granite": ("granite", "F32", {}),
    "olmo2": ("olmo2", "F32", {}),
    "llama-Q8_0": ("llama", "Q8_0", {}),
    "llama-IQ4_NL": ("llama", "IQ4_NL", dict(d=256, ff=256)),
    "llama-IQ4_XS": ("llama", "IQ4_XS", dict(d=256, ff=256)),
    "llama-MXFP4": ("llama", "MXFP4", {}),
}
# F32 weights: llama.cpp and llamay differ only in float32 summation order and rope angles.
# Quantized: llama.cpp's cpu multiplies with activations quantized to 8 bits (q8_0/q8_K).
NMSE_LIMIT = {"F32": 1e-5, "Q8_0": 1e-3, "IQ4_NL": 1e-3, "IQ4_XS": 1e-3, "MXFP4": 1e-3}


def llamacpp(path, n_ctx: int = 512):
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                           type_k=0, type_v=0, verbose=False)


def llamacpp_logits(llm, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], np.float64)


def llamacpp_ppl(llm, tokens: list[int], n_ctx: int, bos: int | None) -> float:
    """llama-perplexity's estimate: chunks of n_ctx from an empty cache, the second half scored."""
    nll = []
    for i in range(len(tokens) // n_ctx):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if bos is not None:
            chunk[0] = bos
        logits = llamacpp_logits(llm, chunk)
        first = n_ctx // 2
        nll.append(log_softmax_nll(logits[first:n_ctx - 1], np.asarray(chunk[first + 1:n_ctx])))
    return math.exp(float(np.concatenate(nll).mean()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_matches_llamacpp(tmp_path, case):
    arch, weight_type, kw = CASES[case]
    path = write_family_gguf(tmp_path / f"{case}.gguf", arch, weight_type=weight_type, **kw)
    ids = [int(i) for i in np.random.default_rng(7).integers(0, 263, N_POSITIONS)]
    model = llamay.load(path, backend="reference", n_ctx=512)
    ours = model.logits(ids).astype(np.float64)
    llm = llamacpp(path)
    theirs = llamacpp_logits(llm, ids)
    per_position = ((ours - theirs) ** 2).sum(1) / (theirs ** 2).sum(1)
    assert per_position.max() < NMSE_LIMIT[weight_type], f"worst position {per_position.argmax()}"
    agree = float((ours.argmax(1) == theirs.argmax(1)).mean())
    assert agree >= 0.98, agree

    n_ctx = 128
    ppl = perplexity(model, TEXT, n_ctx=n_ctx).ppl
    tokens = model.tokenize(TEXT, add_special=True, parse_special=False)
    bos = model.tokenizer.bos_id if model.tokenizer.add_bos else None
    reference_ppl = llamacpp_ppl(llamacpp(path, n_ctx), tokens, n_ctx, bos)
    assert abs(ppl / reference_ppl - 1) < 0.01, (ppl, reference_ppl)
