"""A short greedy comparison against `reference`, for backends with no conformance record."""
from __future__ import annotations

from typing import Any

import numpy as np

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.state.records import ConformanceRecord, save_record

QUICK_PROMPT = "The history of the printing press begins in"
QUICK_TOKENS = 8


def greedy_continue(ctx: Any, ids: list[int], n: int) -> list[int]:
    """Extend `ctx` by `ids`, then `n` greedy tokens, one per pass (each is run, the last too)."""
    logits = ctx.extend(ids)
    out = []
    for _ in range(n):
        token = int(np.argmax(logits))
        out.append(token)
        logits = ctx.extend([token])
    return out


def greedy_ids(model: Any, prompt_ids: list[int], n: int) -> list[int]:
    """Plain greedy decoding from an empty context: the tokens any correct backend must produce."""
    ctx = model.context()
    try:
        return greedy_continue(ctx, prompt_ids, n)
    finally:
        ctx.close()


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_greedy(path: Any, backend_name: str, n_tokens: int = QUICK_TOKENS,
                   prompt: str = QUICK_PROMPT, candidate: Any = None) -> tuple[bool, str, list[int], list[int]]:
    """Greedy tokens of `backend_name` vs reference on one prompt: (same, summary, ref, got).

    `candidate` is the model already loaded on that backend, if the caller has one.
    """
    from llamay_core.engine.loader import load_model

    ref = load_model(path, backend="reference", n_ctx=256, n_seq=1)
    ids = ref.tokenize(prompt, add_special=True)
    expected = greedy_ids(ref, ids, n_tokens)
    cand = candidate if candidate is not None else load_model(path, backend=backend_name, n_ctx=256, n_seq=1)
    got = greedy_ids(cand, ids, n_tokens)
    at = first_divergence(expected, got)
    if at is None:
        return True, f"{n_tokens} greedy tokens match reference", expected, got
    return False, (f"diverged from reference at generated token {at}: reference {expected[at]} "
                   f"{ref.detokenize([expected[at]])!r}, {backend_name} {got[at]} {ref.detokenize([got[at]])!r}"), expected, got


def quick_check(gguf: GGUFFile, spec: ModelSpec, backend_name: str, backend: Any) -> ConformanceRecord:
    passed, summary, _, _ = compare_greedy(gguf.path, backend_name)
    record = ConformanceRecord(backend=backend_name, backend_version=str(getattr(backend, "version", "")),
                               model_hash=gguf.file_hash(), passed=passed, level="quick", summary=summary,
                               device=backend.probe().device)
    save_record(record)
    return record
