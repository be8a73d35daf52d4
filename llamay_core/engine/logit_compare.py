"""Comparing a backend's logits with reference's, the way llama-perplexity --kl-divergence does.

Shared by the quick check in the core and the calibrated model level in conformance/: per scored
position, the KL divergence KL(reference || backend) of the softmaxed logits, whether the top-1
token is the same, and reference's top-2 margin, so that a greedy or top-1 difference counts only
where reference itself is not at a near-tie.
"""
from __future__ import annotations

import attrs
import numpy as np

# A top-1 flip where reference's two best logits are closer than this is a near-tie: any
# correct backend with different rounding (8-bit activations, another summation order) may flip it.
# Measured (docs/backend-authors.md, "Calibration"): int8 activations per 32 on smollm2:135m flip
# top-1 at 4 of 1,024 positions where reference's margin is above 0.5, the widest at 1.15.
TIE_MARGIN = 2.0


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (rows are positions)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl_divergence(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """KL(reference || candidate) per row, in nats; both [positions, vocab] logits."""
    lp = log_softmax(reference)
    lq = log_softmax(candidate)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Per row, the best logit minus the second best."""
    x = np.asarray(logits, dtype=np.float64)
    top2 = np.partition(x, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


@attrs.frozen
class LogitComparison:
    """Per-position comparison of candidate logits with reference logits."""

    kld: np.ndarray  # float64 [positions]
    same_top1: np.ndarray  # bool [positions]
    ref_margin: np.ndarray  # float64 [positions]

    @property
    def n(self) -> int:
        return int(self.kld.shape[0])

    def mean_kld(self) -> float:
        return float(self.kld.mean()) if self.n else 0.0

    def kld_quantile(self, q: float) -> float:
        return float(np.quantile(self.kld, q)) if self.n else 0.0

    def same_top1_rate(self) -> float:
        return float(self.same_top1.mean()) if self.n else 1.0

    def decisive_flips(self, tie_margin: float = TIE_MARGIN) -> np.ndarray:
        """Positions whose top-1 differs although reference's margin there exceeds `tie_margin`."""
        return np.nonzero(~self.same_top1 & (self.ref_margin > tie_margin))[0]

    @classmethod
    def concat(cls, parts: "list[LogitComparison]") -> "LogitComparison":
        if not parts:
            empty = np.zeros(0)
            return cls(empty, empty.astype(bool), empty)
        return cls(np.concatenate([p.kld for p in parts]), np.concatenate([p.same_top1 for p in parts]),
                   np.concatenate([p.ref_margin for p in parts]))


def compare_logits(reference: np.ndarray, candidate: np.ndarray) -> LogitComparison:
    """Compare [positions, vocab] logits row by row. Non-finite candidate rows count as infinitely far."""
    reference = np.asarray(reference, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if reference.shape != candidate.shape:
        raise ValueError(f"logits shapes differ: reference {reference.shape}, candidate {candidate.shape}")
    finite = np.isfinite(candidate).all(axis=-1)
    safe = np.where(finite[:, None], candidate, 0.0)
    kld = np.where(finite, kl_divergence(reference, safe), np.inf)
    same = (np.argmax(reference, axis=-1) == np.argmax(safe, axis=-1)) & finite
    return LogitComparison(kld=kld, same_top1=same, ref_margin=top2_margin(reference))
