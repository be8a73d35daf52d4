"""Perplexity the way llama.cpp's llama-perplexity computes it.

The text is split into chunks of n_ctx tokens; each chunk is evaluated from an empty cache
(its first token replaced by BOS when the model adds one) and only its second half is scored,
so every scored token sees at least n_ctx/2 tokens of context.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import attrs
import numpy as np


@attrs.frozen
class PerplexityResult:
    ppl: float
    uncertainty: float
    chunks: int
    scored_tokens: int
    per_chunk: tuple[float, ...]


def log_softmax_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    zmax = z.max(axis=-1, keepdims=True)
    logsum = np.log(np.exp(z - zmax).sum(axis=-1)) + zmax[:, 0]
    return logsum - z[np.arange(len(targets)), targets]


def perplexity(model: Any, text: str, n_ctx: int = 512, max_chunks: int | None = None,
               progress: Callable[[int, float], None] | None = None) -> PerplexityResult:
    tokens = model.tokenize(text, add_special=True, parse_special=False)
    n_chunks = len(tokens) // n_ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise ValueError(f"need at least {n_ctx} tokens, the text has {len(tokens)}")
    add_bos = bool(model.tokenizer.add_bos)
    first = n_ctx // 2
    nll_all: list[np.ndarray] = []
    per_chunk = []
    for i in range(n_chunks):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos:
            chunk[0] = model.tokenizer.bos_id
        logits = model.logits(chunk)
        nll = log_softmax_nll(logits[first:n_ctx - 1], np.asarray(chunk[first + 1:n_ctx]))
        nll_all.append(nll)
        running = math.exp(float(np.concatenate(nll_all).mean()))
        per_chunk.append(running)
        if progress:
            progress(i + 1, running)
    nll = np.concatenate(nll_all)
    mean = float(nll.mean())
    ppl = math.exp(mean)
    # llama.cpp's estimate: the standard error of the mean NLL, carried through exp().
    err = float(np.sqrt(max(float((nll * nll).mean()) - mean * mean, 0.0) / max(len(nll) - 1, 1))) * ppl
    return PerplexityResult(ppl=ppl, uncertainty=err, chunks=n_chunks, scored_tokens=len(nll), per_chunk=tuple(per_chunk))
