"""The speculative decoding loop that `Generation.tokens` runs when it has a SpeculativeConfig.

Each round is one target pass over [last token, d1..dk]: the last emitted token (not yet in the
cache) followed by the drafts. Row i of that pass is the target's prediction after token i, so
draft d(i+1) is checked against row i; the first rejected draft is replaced by a token drawn
from the target (greedy: its argmax; sampled: the residual distribution), and when every draft
is accepted the last row gives one more. A round therefore emits accepted + 1 tokens, the cache
is truncated to drop the rejected drafts (whole pages are released), and greedy output is
token-for-token the output of plain decoding.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

import numpy as np

from llamay_core.speculative.stats import SpeculativeStats
from llamay_core.speculative.verify import accept_or_resample

if TYPE_CHECKING:
    from llamay_core.engine.generate import Generation


def speculative_tokens(gen: "Generation", first_logits: np.ndarray, history: list[int]) -> Iterator[int]:
    """Yield generated tokens like the plain loop does; `history` is the context's tokens."""
    ctx = gen.ctx
    config = gen.speculative
    drafter = config.drafter(ctx.model)
    stats = SpeculativeStats(method=drafter.name, draft_max=config.draft_max, target_passes=1)
    gen.stats.speculative = stats
    rows: np.ndarray = first_logits[None, :]
    drafts: list[int] = []
    # The cache held `base` tokens before this round's pass, which ran `lead` + drafts more:
    # the prompt pass has no lead; a verify pass leads with the last emitted token.
    base, lead = len(ctx.tokens), 0
    want = config.draft_max
    try:
        while True:
            accepted = 0
            for i in range(rows.shape[0]):
                draft = drafts[i] if i < len(drafts) else None
                token, ok = _choose(gen, rows[i], history, draft)
                accepted += ok
                stats.accepted += ok
                alive = gen.record(token, history)
                stats.generated = len(gen.generated)
                if not alive:
                    return
                yield token
                if gen.finished_after_yield():
                    return
                if not ok:
                    break
            # Keep the last token and the accepted drafts; the rejected drafts leave the cache.
            ctx.truncate(base + lead + accepted)
            pending = history[-1]
            t0 = time.perf_counter()
            # Draft as far as recent rounds were right: all accepted doubles the length (up to
            # draft_max), a rejection shrinks it to what was accepted plus one. Verifying a
            # wrong draft costs a full row of compute, so a prompt with nothing to copy should
            # stop paying for long drafts.
            if drafts:
                want = min(config.draft_max, 2 * want) if accepted == len(drafts) else accepted + 1
            room = min(want, gen.max_tokens - len(gen.generated) - 1, ctx.model.n_ctx - len(ctx.tokens) - 1)
            drafts = drafter.propose(history, room) if room > 0 else []
            if drafts and gen.constraint is not None:
                drafts = drafts[:gen.constraint.valid_prefix(drafts)]
            stats.draft_seconds += time.perf_counter() - t0
            stats.drafted += len(drafts)
            base, lead = len(ctx.tokens), 1
            rows = ctx.extend_all([pending] + drafts)
            stats.target_passes += 1
    finally:
        # As after plain decoding: the cache holds every emitted token but the last.
        ctx.truncate(len(history) - 1)
        drafter.close()


def _choose(gen: "Generation", logits: np.ndarray, history: list[int], draft: int | None) -> tuple[int, bool]:
    """The token at this position and whether it is the draft: the target decides."""
    constraint = gen.constraint
    if constraint is not None:
        logits = constraint.mask_logits(logits)
    sampler = gen.sampler
    if gen.params.greedy or draft is None:
        token = sampler.sample(logits, history)
        ok = token == draft
    else:
        token, ok = accept_or_resample(sampler.probabilities(logits, history), draft, sampler.rng)
    if constraint is not None and token not in gen.ctx.model.tokenizer.eog_ids:
        constraint.advance(token)
    return token, ok
