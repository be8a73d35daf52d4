"""Plan steps for the ops only some families use: scaled rope, column slices, expert feed-forward.

Kept apart from plan.py so the common ops' kernels evolve without these in the way. Each
function takes the plan (for buffers and row counts) and the node, and returns the step.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from llamay_core.graph import ops as G
from llamay_backends.cpu import kernels, ops


def step(plan: Any, node: Any) -> Callable[[Any], None]:
    if isinstance(node, G.RopeTable):
        return _rope_table(plan, node)
    if isinstance(node, G.Columns):
        return _columns(plan, node)
    if isinstance(node, G.Moe):
        return _moe(plan, node)
    raise NotImplementedError(f"cpu backend has no op {node.name!r}")


def _rope_table(plan: Any, node: G.RopeTable) -> Callable[[Any], None]:
    if node.mode not in ("normal", "neox"):
        raise ValueError(f"unknown rope mode {node.mode!r}")
    count = plan._count
    x = plan._value(node.x)
    out = plan._buffer(node.out, x.shape[1])
    freqs = np.array(node.freqs, np.float64)
    args = (node.n_heads, node.head_dim, node.n_rot, node.mode == "neox")
    angles = plan.rope_angles(freqs, 1.0)
    mscale = np.float32(node.mscale)

    def rope_table(p: Any) -> None:
        n = count(p)
        cos, sin = angles(p)
        ops.rope_rotate(x[:n], cos, sin, *args, out[:n])
        if mscale != 1.0:
            out[:n].reshape(n, node.n_heads, node.head_dim)[:, :, :node.n_rot] *= mscale
    return rope_table


def _columns(plan: Any, node: G.Columns) -> Callable[[Any], None]:
    count = plan._count
    x = plan._value(node.x)
    out = plan._buffer(node.out, node.width)
    a, b = node.start, node.start + node.width
    return lambda p: np.copyto(out[:count(p)], x[:count(p), a:b])


def _moe(plan: Any, node: G.Moe) -> Callable[[Any], None]:
    """Route with the router matmul and a softmax, then run each chosen expert on its tokens."""
    count = plan._count
    w = plan.weights
    x = plan._value(node.x)
    out = plan._buffer(node.out, x.shape[1])
    router, gate, up, down = w[node.router], w[node.gate_exps], w[node.up_exps], w[node.down_exps]
    n_exp, ff, d = gate.shape
    logits = np.zeros((plan.max_tokens, n_exp), np.float32)

    def expert_rows(weight: Any, e: int, rows: int) -> np.ndarray:
        return weight.rows[e * rows:(e + 1) * rows]

    def moe(p: Any) -> None:
        n = count(p)
        h = x[:n]
        kernels.matmul(router.code, router.rows, h, logits[:n])
        z = logits[:n].astype(np.float64)
        probs = np.exp(z - z.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        chosen = np.argsort(-probs, axis=1, kind="stable")[:, :node.n_used]
        weights = np.take_along_axis(probs, chosen, axis=1)
        if node.normalize:
            weights /= weights.sum(axis=1, keepdims=True)
        acc = np.zeros((n, d), np.float64)
        for e in np.unique(chosen):
            tok, slot = np.nonzero(chosen == e)
            xs = np.ascontiguousarray(h[tok])
            g = np.empty((len(tok), ff), np.float32)
            u = np.empty((len(tok), ff), np.float32)
            kernels.matmul(gate.code, expert_rows(gate, e, ff), xs, g)
            kernels.matmul(up.code, expert_rows(up, e, ff), xs, u)
            m = np.empty_like(g)
            ops.silu_mul(g, u, m)
            y = np.empty((len(tok), d), np.float32)
            kernels.matmul(down.code, expert_rows(down, e, d), m, y)
            acc[tok] += weights[tok, slot][:, None] * y
        out[:n] = acc
    return moe
