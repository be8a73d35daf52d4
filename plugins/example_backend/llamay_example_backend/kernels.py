"""What each op computes, in float32 NumPy. Replace these with your device's kernels.

Each function takes and returns float32 arrays [rows, width]. Precision notes say where float32
is not enough to stay inside the conformance limits.
"""
from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float, group: int, weight_offset: float) -> np.ndarray:
    rows = x.reshape(x.shape[0], -1, group) if group else x[:, None, :]
    mean_sq = np.mean(rows * rows, axis=-1, keepdims=True, dtype=np.float32)
    y = rows / np.sqrt(mean_sq + np.float32(eps))
    if weight is not None:  # the weight has `group` entries when normalising per head
        y = y * (weight + np.float32(weight_offset))
    return y.reshape(x.shape).astype(np.float32, copy=False)


def rope_tables(positions: np.ndarray, n_rot: int, base: float, freq_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, n_rot/2]. The angle is computed in float64: at position 30000 a float32 angle
    is off by ~2e-3 rad, which costs most of the rope error budget."""
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    theta = positions.astype(np.float64)[:, None] * (freq_scale * inv_freq)[None, :]
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


def rope(x: np.ndarray, positions: np.ndarray, n_heads: int, head_dim: int, n_rot: int, mode: str,
         base: float, freq_scale: float) -> np.ndarray:
    cos, sin = rope_tables(positions, n_rot, base, freq_scale)
    cos, sin = cos[:, None, :], sin[:, None, :]
    h = x.reshape(x.shape[0], n_heads, head_dim)
    out = h.copy()
    if mode == "normal":  # pairs (2i, 2i+1)
        a, b = h[..., 0:n_rot:2], h[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    elif mode == "neox":  # pairs (i, i + n_rot/2)
        half = n_rot // 2
        a, b = h[..., :half], h[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        raise ValueError(f"unknown rope mode {mode!r}")
    return out.reshape(x.shape)


def attention(q: np.ndarray, q_positions: np.ndarray, k: np.ndarray, v: np.ndarray, n_heads: int,
              n_kv_heads: int, key_dim: int, value_dim: int, scale: float, softcap: float, window: int) -> np.ndarray:
    """Causal grouped-query attention of one sequence: q [t, H*dk] over k [L, Hkv*dk], v [L, Hkv*dv]."""
    t, length = q.shape[0], k.shape[0]
    group = n_heads // n_kv_heads
    qh = q.reshape(t, n_kv_heads, group, key_dim)
    kh = k.reshape(length, n_kv_heads, key_dim)
    vh = v.reshape(length, n_kv_heads, value_dim)
    scores = np.einsum("tkgd,lkd->kgtl", qh, kh, optimize=True) * np.float32(scale)
    if softcap:
        scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
    key_pos = np.arange(length)[None, :]
    masked = key_pos > q_positions[:, None]
    if window:
        masked |= key_pos <= q_positions[:, None] - window
    scores = np.where(masked, np.float32(-np.inf), scores)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = np.einsum("kgtl,lkd->tkgd", probs, vh, optimize=True)
    return out.reshape(t, n_heads * value_dim).astype(np.float32, copy=False)


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return gate / (np.float32(1) + np.exp(-gate)) * up


def gelu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    inner = np.float32(np.sqrt(2.0 / np.pi)) * (gate + np.float32(0.044715) * gate * gate * gate)
    return np.float32(0.5) * gate * (np.float32(1) + np.tanh(inner)) * up


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    return np.float32(cap) * np.tanh(x / np.float32(cap))
