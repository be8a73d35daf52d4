"""The op catalog. Each op is a frozen record; `backends/reference` defines what it computes.

Values are named activations: 2-D float32 arrays [tokens, width]. Ops that read weights name
the GGUF tensor; ops that touch the KV cache name the layer. The batch supplies token ids,
positions and page tables, so a graph is built once per model and reused for every pass.
"""
from __future__ import annotations

from typing import Optional

import attrs


@attrs.frozen
class Embed:
    """out[t] = weight row `tokens[t]` (the table stored in its GGML type), times `scale`."""

    out: str
    weight: str
    scale: float = 1.0
    name = "embed"


@attrs.frozen
class RmsNorm:
    """out = x / sqrt(mean(x^2) + eps) * (weight + weight_offset), over groups of `group` columns.

    `group` = 0 normalises whole rows; a head size normalises each head (QK-norm).
    """

    out: str
    x: str
    weight: Optional[str]
    eps: float
    group: int = 0
    weight_offset: float = 0.0
    name = "rms_norm"


@attrs.frozen
class MatMul:
    """out = x @ weight.T (+ bias): weight is [out_features, in_features] in any GGML type."""

    out: str
    x: str
    weight: str
    bias: Optional[str] = None
    name = "matmul"


@attrs.frozen
class Add:
    """out = a + b (same shape)."""

    out: str
    a: str
    b: str
    name = "add"


@attrs.frozen
class Mul:
    """out = a * b (same shape)."""

    out: str
    a: str
    b: str
    name = "mul"


@attrs.frozen
class Scale:
    """out = x * factor."""

    out: str
    x: str
    factor: float
    name = "scale"


@attrs.frozen
class Rope:
    """Rotary position embedding on `n_heads` heads of `head_dim`, the first `n_rot` dims.

    mode "normal" rotates adjacent pairs (2i, 2i+1); "neox" rotates (i, i + n_rot/2).
    theta_i = position * freq_scale * base^(-2i/n_rot).
    """

    out: str
    x: str
    n_heads: int
    head_dim: int
    n_rot: int
    mode: str
    base: float
    freq_scale: float = 1.0
    name = "rope"


@attrs.frozen
class KvWrite:
    """Store k [T, n_kv*key_dim] and v [T, n_kv*value_dim] of `layer` at the batch positions."""

    layer: int
    k: str
    v: str
    name = "kv_write"


@attrs.frozen
class Attention:
    """Causal attention of q [T, n_heads*key_dim] over the layer's cached K/V (grouped heads).

    Each token attends to positions 0..p of its own sequence (and, with `window` > 0, only to
    the last `window` of them). scores = q.k * scale, optionally softcapped: cap*tanh(s/cap).
    """

    out: str
    q: str
    layer: int
    n_heads: int
    n_kv_heads: int
    key_dim: int
    value_dim: int
    scale: float
    softcap: float = 0.0
    window: int = 0
    name = "attention"


@attrs.frozen
class SiluMul:
    """out = silu(gate) * up (SwiGLU)."""

    out: str
    gate: str
    up: str
    name = "silu_mul"


@attrs.frozen
class GeluMul:
    """out = gelu_tanh(gate) * up (GeGLU)."""

    out: str
    gate: str
    up: str
    name = "gelu_mul"


@attrs.frozen
class Softcap:
    """out = cap * tanh(x / cap)."""

    out: str
    x: str
    cap: float
    name = "softcap"


@attrs.frozen
class SelectRows:
    """out = x[batch.logit_rows]: keep only the rows whose logits are wanted."""

    out: str
    x: str
    name = "select_rows"


@attrs.frozen
class RopeTable:
    """Rotary embedding with one frequency per rotated pair: theta_i = position * freqs[i].

    Covers every scaled rope a GGUF describes (linear, YaRN, per-dimension factors from a
    `rope_freqs` tensor): the family folds them into `freqs` (n_rot/2 values). The rotated
    dims are multiplied by `mscale` (YaRN's magnitude correction); the rest pass through.
    Pairs as in `Rope` ("normal" or "neox").
    """

    out: str
    x: str
    n_heads: int
    head_dim: int
    n_rot: int
    mode: str
    freqs: tuple[float, ...]
    mscale: float = 1.0
    name = "rope_table"


@attrs.frozen
class Columns:
    """out = x[:, start:start + width]: one part of a fused projection (phi3's qkv, gate_up)."""

    out: str
    x: str
    start: int
    width: int
    name = "columns"


@attrs.frozen
class Moe:
    """A mixture-of-experts SwiGLU feed-forward over x [T, d], experts as 3-D GGUF tensors.

    probs = softmax(x @ router.T) over `n_experts`; the `n_used` most probable experts e
    (ties: lower index first) get weights probs[e], divided by their sum when `normalize`;
    out = sum_e weight_e * down_e(silu(gate_e x) * up_e x), where gate_e, up_e, down_e are
    slice e of `gate_exps` [E, ff, d], `up_exps` [E, ff, d] and `down_exps` [E, d, ff].
    """

    out: str
    x: str
    router: str
    gate_exps: str
    up_exps: str
    down_exps: str
    n_experts: int
    n_used: int
    normalize: bool
    name = "moe"
    weight_fields = ("router", "gate_exps", "up_exps", "down_exps")


@attrs.frozen
class Input:
    """out = batch.inputs[out]: an activation [rows, width] handed in by the engine.

    Plumbing for graph splits (llamay_core/engine/split.py): a segment of the graph running on
    another backend produced this value. Not part of any model graph; a backend that declares
    `input` and `export` can share a graph with the fallback backend.
    """

    out: str
    width: int
    name = "input"


@attrs.frozen
class Export:
    """batch.outputs[x] = x as a float32 host array: a value a later graph segment needs."""

    x: str
    name = "export"


OP_TYPES = (Embed, RmsNorm, MatMul, Add, Mul, Scale, Rope, KvWrite, Attention, SiluMul, GeluMul,
            Softcap, SelectRows)
OP_NAMES = frozenset(t.name for t in OP_TYPES)
# Ops that only move activations between backends when a graph is split; not model math.
SPLIT_OP_TYPES = (Input, Export)
SPLIT_OP_NAMES = frozenset(t.name for t in SPLIT_OP_TYPES)
# Ops only some families use; a backend declares each it implements, and the graph split runs
# the rest elsewhere. They stay out of OP_NAMES, which backends claim wholesale.
EXTENDED_OP_TYPES = (RopeTable, Columns, Moe)
EXTENDED_OP_NAMES = frozenset(t.name for t in EXTENDED_OP_TYPES)
