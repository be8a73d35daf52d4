"""Turning logits into a token: penalties, top-k, top-p, min-p, temperature, seeded draws.

The order follows llama.cpp's default chain: repetition penalty, top-k, top-p, min-p,
temperature, then a draw. Temperature 0 is greedy (argmax) and ignores the rest.
"""
from __future__ import annotations

from typing import Sequence

import attrs
import numpy as np

from llamay_core.errors import UsageError


def _non_negative(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if value < 0:
        raise UsageError(f"{attribute.name} must be >= 0, got {value}")


def _unit_interval(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{attribute.name} must be between 0 and 1, got {value}")


@attrs.frozen
class SamplingParams:
    temperature: float = attrs.field(default=0.0, validator=_non_negative)
    top_k: int = attrs.field(default=0, validator=_non_negative)  # 0 = off
    top_p: float = attrs.field(default=1.0, validator=_unit_interval)
    min_p: float = attrs.field(default=0.0, validator=_unit_interval)
    repeat_penalty: float = attrs.field(default=1.0, validator=_non_negative)  # 1 = off
    repeat_last_n: int = 64
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Sampler:
    """Holds the random state of one generation so a seed reproduces it exactly."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def probabilities(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """The distribution a draw is made from (all zeros except the kept candidates)."""
        p = self.params
        z = logits.astype(np.float64).copy()
        if p.repeat_penalty != 1.0 and history:
            recent = np.unique(np.asarray(history[-p.repeat_last_n:], dtype=np.int64))
            vals = z[recent]
            z[recent] = np.where(vals > 0, vals / p.repeat_penalty, vals * p.repeat_penalty)
        if p.greedy:
            out = np.zeros_like(z)
            out[int(np.argmax(z))] = 1.0
            return out
        keep = np.ones(z.shape[0], bool)
        if p.top_k and p.top_k < z.shape[0]:
            kth = np.partition(z, -p.top_k)[-p.top_k]
            keep &= z >= kth
        z = np.where(keep, z, -np.inf)
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cum = np.cumsum(probs[order])
            cut = int(np.searchsorted(cum, p.top_p)) + 1  # keep the smallest set reaching top_p
            mask = np.zeros_like(keep)
            mask[order[:cut]] = True
            keep &= mask
        if p.min_p > 0.0:
            keep &= probs >= p.min_p * probs.max()
        z = np.where(keep, logits.astype(np.float64), -np.inf)
        if p.repeat_penalty != 1.0 and history:
            z[recent] = np.where(keep[recent], np.where(vals > 0, vals / p.repeat_penalty, vals * p.repeat_penalty), -np.inf)
        z = z / p.temperature
        out = np.exp(z - z.max())
        return out / out.sum()

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        if self.params.greedy and self.params.repeat_penalty == 1.0:
            return int(np.argmax(logits))
        probs = self.probabilities(logits, history)
        if self.params.greedy:
            return int(np.argmax(probs))
        # Inverse CDF: one uniform draw per token keeps seeded runs reproducible and cheap.
        cdf = np.cumsum(probs)
        return int(min(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"), probs.shape[0] - 1))
