"""A short check of a loaded model against `reference`, for backends with no trusted record.

It runs on the model as the user loaded it (its page size and KV dtype), so it tests what will
run. Two sequences of different lengths go through the same passes: the long one grows past two
pages, its cache length landing exactly on a page boundary on the way, and both finish with a
one-token decode step. Every position's logits are compared with reference's for the whole
sequence in one pass (`logit_compare`): logits must be finite, and the top-1 token may differ only
where reference itself is at a near-tie. The result is recorded, failures too, so a broken backend
is not re-checked on every load (records are per backend version: an edited backend is rechecked).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

import attrs
import numpy as np

from llamay_core.engine.forward import SequenceChunk
from llamay_core.engine.kv_pages import SequenceKV
from llamay_core.engine.loader import load_model, reference_name
from llamay_core.engine.logit_compare import TIE_MARGIN, LogitComparison, compare_logits
from llamay_core.state.records import ConformanceRecord, save_record

QUICK_TEXT = ("The history of the printing press begins in the workshops of fifteenth-century Mainz, where "
              "Johannes Gutenberg combined movable metal type, oil-based ink and a screw press. Within fifty "
              "years, presses were running in more than two hundred European towns.")
SHORT_TEXT = "Rivers carve valleys over millions of years,"

progress = logging.getLogger("llamay.progress")


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


def token_run(model: Any, text: str, n: int) -> list[int]:
    """The first `n` tokens of `text` (repeated as needed), starting with BOS when the model adds one."""
    ids = model.tokenize(text, add_special=True)
    body = model.tokenize(" " + text, add_special=False) or ids
    while len(ids) < n:
        ids = ids + body
    return ids[:n]


@attrs.frozen
class QuickPlan:
    """The two sequences and, per pass, how many tokens of each it runs."""

    long: list[int]
    short: list[int]
    passes: list[tuple[int, int]]  # (tokens of the long sequence, tokens of the short one)

    @classmethod
    def for_model(cls, model: Any) -> "QuickPlan":
        page = model.kv_spec.page_size
        budget = max(1, min(model.forward.ubatch, model.backend.capabilities.max_tokens_per_pass) - 2)
        long_prefix, rest = 2 * page, 4  # the cache sits exactly on a page boundary after the prefix
        passes: list[tuple[int, int]] = []
        done = 0
        while done < long_prefix:  # the prefix, a page (or what a pass holds) at a time
            step = min(page, budget, long_prefix - done)
            passes.append((step, 1))
            done += step
        passes += [(rest - 1, 1), (1, 1)]  # past the boundary into a third page, then a decode step
        return cls(long=token_run(model, QUICK_TEXT, long_prefix + rest),
                   short=token_run(model, SHORT_TEXT, sum(s for _, s in passes)), passes=passes)


@attrs.frozen
class QuickResult:
    comparison: LogitComparison
    covers: list[str]
    problem: str  # "" when the backend agrees with reference

    @property
    def passed(self) -> bool:
        return not self.problem


def run_passes(model: Any, plan: QuickPlan) -> tuple[list[np.ndarray], list[str]]:
    """Both sequences through `model` pass by pass; logits at every position, and what was covered."""
    long_seq, short_seq = SequenceKV(model.pool), SequenceKV(model.pool)
    page = model.kv_spec.page_size
    got: list[list[np.ndarray]] = [[], []]
    at = [0, 0]
    batched = on_boundary = False
    try:
        for n_long, n_short in plan.passes:
            chunks = [SequenceChunk(long_seq, plan.long[at[0]:at[0] + n_long], all_logits=True),
                      SequenceChunk(short_seq, plan.short[at[1]:at[1] + n_short], all_logits=True)]
            out = model.forward.run_many(chunks)
            for i, n in enumerate((n_long, n_short)):
                got[i].append(out[i])
                at[i] += n
            batched = batched or at[0] != at[1]
            on_boundary = on_boundary or (at[0] % page == 0 and at[0] >= 2 * page)
    finally:
        long_seq.release()
        short_seq.release()
    covers = []
    if on_boundary and at[0] > 2 * page:
        covers.append("multi_page")
    if batched:
        covers.append("batching")
    return [np.concatenate(g, axis=0) for g in got], covers


def describe_problem(comparison: LogitComparison, lengths: Sequence[int]) -> str:
    """One line on the first position that disagrees, or "" when none does."""
    def where(row: int) -> str:
        seq = 0 if row < lengths[0] else 1
        return f"position {row - seq * lengths[0]} of the {('long', 'short')[seq]} sequence"

    bad = np.nonzero(~np.isfinite(comparison.kld))[0]
    if bad.size:
        return f"non-finite logits at {where(int(bad[0]))}"
    flips = comparison.decisive_flips(TIE_MARGIN)
    if flips.size:
        row = int(flips[0])
        return (f"top-1 token differs from reference at {where(row)} (reference margin "
                f"{comparison.ref_margin[row]:.2f}; {flips.size} such positions)")
    return ""


def compare_with_reference(model: Any) -> QuickResult:
    """Run the quick plan on `model` and on reference; compare every position's logits."""
    plan = QuickPlan.for_model(model)
    got, covers = run_passes(model, plan)
    spec = model.kv_spec
    ref = load_model(model.gguf.path, backend=reference_name(), n_ctx=len(plan.long), kv_dtype=spec.dtype,
                     page_size=spec.page_size, n_seq=2)
    seqs = [SequenceKV(ref.pool), SequenceKV(ref.pool)]
    try:  # each whole sequence in one reference pass (both in the same one: a reference pass is slow)
        want = ref.forward.run_many([SequenceChunk(seq, ids, all_logits=True)
                                     for seq, ids in zip(seqs, (plan.long, plan.short))])
    finally:
        for seq in seqs:
            seq.release()
        ref.close()
    parts = [compare_logits(w, g) for w, g in zip(want, got)]
    comparison = LogitComparison.concat(parts)
    return QuickResult(comparison, covers, describe_problem(comparison, [len(plan.long), len(plan.short)]))


def quick_check(model: Any) -> ConformanceRecord:
    """Check `model`'s backend against reference on this model and save the record."""
    progress.info("checking %s against reference (first use of this model)", model.backend_name)
    result = compare_with_reference(model)
    c = result.comparison
    summary = result.problem or (f"{c.n} positions on 2 sequences in shared passes match reference "
                                 f"(top-1 {c.same_top1_rate():.0%}, mean KLD {c.mean_kld():.2g})")
    record = ConformanceRecord(backend=model.backend_name, backend_version=str(model.backend.version),
                               model_hash=model.gguf.file_hash(), passed=result.passed, level="quick",
                               summary=summary, device=model.backend.probe().device,
                               details={"positions": c.n, "mean_kld": c.mean_kld(),
                                        "same_top1_rate": c.same_top1_rate()},
                               covers=result.covers)
    save_record(record)
    return record
