"""How KV values are stored per dtype: f32, f16, and vq8 (int8 blocks of 32 with an f16 scale)."""
from __future__ import annotations

import numpy as np

VQ8_BLOCK = 32


def vq8_encode(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize the last axis in blocks of 32: q = round(x / d), d = max|x| / 127 (as q8_0)."""
    blocks = x.reshape(*x.shape[:-1], -1, VQ8_BLOCK).astype(np.float32)
    amax = np.abs(blocks).max(axis=-1)
    d = (amax / 127.0).astype(np.float16)
    d32 = d.astype(np.float32)
    inv = np.divide(1.0, d32, out=np.zeros_like(d32), where=d32 != 0)
    q = np.clip(np.rint(blocks * inv[..., None]), -127, 127).astype(np.int8)
    return q.reshape(x.shape), d


def vq8_decode(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    blocks = q.reshape(*q.shape[:-1], -1, VQ8_BLOCK).astype(np.float32)
    return (blocks * d.astype(np.float32)[..., None]).reshape(q.shape)
