"""The accept/reject rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

A draft token x proposed with probability q(x) is accepted with probability min(1, p(x)/q(x)),
where p is the target's distribution at that position; on rejection a token is drawn from
max(0, p - q) renormalised. The token that comes out is distributed exactly as p. A drafter that
proposes one token for sure (n-gram lookup, a greedy draft model) has q = one-hot(x): accept with
probability p(x), else draw from p with x removed.
"""
from __future__ import annotations

import numpy as np


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token from `probs` by inverse CDF (the same draw `Sampler.sample` makes)."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), probs.shape[0] - 1))


def accept_or_resample(p: np.ndarray, draft: int, rng: np.random.Generator,
                       q: np.ndarray | None = None) -> tuple[int, bool]:
    """(token, accepted): the draft itself if accepted, else a token from the residual distribution.

    `p` is the target's distribution, `q` the drafter's (None: the draft was certain).
    """
    px = float(p[draft])
    qx = 1.0 if q is None else float(q[draft])
    if px > 0.0 and (px >= qx or rng.random() * qx < px):
        return draft, True
    if q is None:
        residual = p.astype(np.float64, copy=True)
        residual[draft] = 0.0
    else:
        residual = np.maximum(p.astype(np.float64) - q, 0.0)
    if residual.sum() <= 0.0:  # p == q exactly: any rejection is impossible in exact arithmetic
        return draft, True
    return draw(residual, rng), False
