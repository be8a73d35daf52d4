"""What each op computes: the living definition. Plain NumPy, float64 where it is cheap.

Every other backend is checked against these functions by `llamay conformance`.
"""
from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float, group: int = 0,
             weight_offset: float = 0.0) -> np.ndarray:
    x64 = x.astype(np.float64)
    shape = x64.shape
    if group:
        x64 = x64.reshape(shape[0], -1, group)
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * (weight.astype(np.float64) + weight_offset)
    return y.reshape(shape).astype(np.float32)


def matmul(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """x [T, in] @ w [out, in]^T. float32 BLAS: float64 would double time for no agreement gain."""
    y = x.astype(np.float32) @ w.T
    if bias is not None:
        y = y + bias
    return y.astype(np.float32)


def rope(x: np.ndarray, positions: np.ndarray, n_heads: int, head_dim: int, n_rot: int, mode: str,
         base: float, freq_scale: float = 1.0) -> np.ndarray:
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    return rope_table(x, positions, n_heads, head_dim, n_rot, mode, freq_scale * inv_freq)


def rope_table(x: np.ndarray, positions: np.ndarray, n_heads: int, head_dim: int, n_rot: int, mode: str,
               freqs: np.ndarray, mscale: float = 1.0) -> np.ndarray:
    """Rotate pair i of each head by position * freqs[i]; the rotated dims scaled by mscale."""
    t = x.shape[0]
    h = x.reshape(t, n_heads, head_dim).astype(np.float64)
    theta = positions.astype(np.float64)[:, None] * np.asarray(freqs, np.float64)[None, :]  # [T, n_rot/2]
    cos, sin = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
    out = h.copy()
    if mode == "normal":
        a, b = h[..., 0:n_rot:2], h[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    elif mode == "neox":
        half = n_rot // 2
        a, b = h[..., :half], h[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        raise ValueError(f"unknown rope mode {mode!r}")
    return out.reshape(t, n_heads * head_dim).astype(np.float32)


def attention_one_sequence(q: np.ndarray, q_positions: np.ndarray, k: np.ndarray, v: np.ndarray,
                           n_heads: int, n_kv_heads: int, key_dim: int, value_dim: int, scale: float,
                           softcap: float = 0.0, window: int = 0) -> np.ndarray:
    """q [t, H*dk] at q_positions over k [L, Hkv*dk], v [L, Hkv*dv] at positions 0..L-1."""
    t, length = q.shape[0], k.shape[0]
    group = n_heads // n_kv_heads
    qh = q.reshape(t, n_heads, key_dim).astype(np.float64)
    kh = np.repeat(k.reshape(length, n_kv_heads, key_dim).astype(np.float64), group, axis=1)
    vh = np.repeat(v.reshape(length, n_kv_heads, value_dim).astype(np.float64), group, axis=1)
    scores = np.einsum("thd,lhd->htl", qh, kh) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    key_pos = np.arange(length)[None, :]
    qp = q_positions[:, None]
    masked = key_pos > qp
    if window:
        masked |= key_pos <= qp - window
    scores = np.where(masked[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("htl,lhd->thd", p, vh)
    return out.reshape(t, n_heads * value_dim).astype(np.float32)


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64 ** 3)))


def gelu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return (gelu_tanh(gate) * up).astype(np.float32)


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    return (cap * np.tanh(x.astype(np.float64) / cap)).astype(np.float32)


def moe(x: np.ndarray, router: np.ndarray, gate_exps: np.ndarray, up_exps: np.ndarray, down_exps: np.ndarray,
        n_used: int, normalize: bool) -> np.ndarray:
    """Top-k softmax routing, then the chosen experts' SwiGLU outputs weighted and summed."""
    logits = x.astype(np.float64) @ router.astype(np.float64).T  # [T, E]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :n_used]
    out = np.zeros((x.shape[0], down_exps.shape[1]), np.float64)
    for t in range(x.shape[0]):
        weights = probs[t, chosen[t]]
        if normalize:
            weights = weights / weights.sum()
        for e, weight in zip(chosen[t], weights):
            h = x[t:t + 1].astype(np.float32)
            m = silu_mul(matmul(h, gate_exps[e]), matmul(h, up_exps[e]))
            out[t] += weight * matmul(m, down_exps[e])[0]
    return out.astype(np.float32)
