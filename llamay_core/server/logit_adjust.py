"""Per-request changes to the logits before sampling: logit_bias, presence and frequency penalties.

The engine's Sampler already applies top-k/top-p/min-p, temperature and the repetition penalty;
these are the OpenAI/llama-server extras, applied first (as llama.cpp's chain does: bias, then
penalties). Requests without them never build one, so the common path costs nothing.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

PENALTY_WINDOW = 64  # tokens looked back for presence/frequency, as llama.cpp's penalty_last_n


class LogitAdjust:
    """Adds `bias[token]` to its logit and subtracts the presence/frequency penalties of recent tokens."""

    def __init__(self, bias: Mapping[int, float], presence: float, frequency: float) -> None:
        self.ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self.values = np.fromiter(bias.values(), dtype=np.float64, count=len(bias))
        self.presence = presence
        self.frequency = frequency

    @classmethod
    def build(cls, bias: Mapping[int, float], presence: float, frequency: float) -> "LogitAdjust | None":
        """None when nothing would change."""
        if not bias and presence == 0.0 and frequency == 0.0:
            return None
        return cls(bias, presence, frequency)

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        z = logits.astype(np.float64)  # a copy: the pass's logits stay untouched
        if self.ids.size:
            z[self.ids] += self.values  # -inf (llama.cpp's `false`) bans a token
        if (self.presence or self.frequency) and history:
            tokens, counts = np.unique(np.asarray(history[-PENALTY_WINDOW:], dtype=np.int64), return_counts=True)
            z[tokens] -= self.presence + self.frequency * counts
        return z
