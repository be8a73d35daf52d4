"""The op catalog. Each op is a frozen record; `backends/reference` defines what it computes.

Values are named activations: 2-D float32 arrays [tokens, width]. Ops that read weights name
the GGUF tensor; ops that touch the KV cache name the layer. The batch supplies token ids,
positions and page tables, so a graph is built once per model and reused for every pass.
"""
from __future__ import annotations

from typing import ClassVar, Optional

import attrs


class Op:
    """What every op record declares: the fields naming activations it reads, the values it
    writes, and the GGUF tensors it reads. Use `inputs()`, `outputs()` and `weights()`; never
    guess them from field names (an op added later may use others)."""

    name: ClassVar[str]
    input_fields: ClassVar[tuple[str, ...]] = ("x",)
    output_fields: ClassVar[tuple[str, ...]] = ("out",)
    weight_fields: ClassVar[tuple[str, ...]] = ()

    def inputs(self) -> tuple[str, ...]:
        """Names of the activations this op reads, in field order."""
        return tuple(getattr(self, f) for f in self.input_fields)

    def outputs(self) -> tuple[str, ...]:
        """Names of the activations this op writes (none for `kv_write` and `export`)."""
        return tuple(getattr(self, f) for f in self.output_fields)

    def weights(self) -> tuple[str, ...]:
        """GGUF tensor names this op reads (an optional weight or bias left as None is skipped)."""
        return tuple(w for w in (getattr(self, f) for f in self.weight_fields) if w is not None)


@attrs.frozen
class Embed(Op):
    """out[t] = weight row `tokens[t]` (the table stored in its GGML type), times `scale`."""

    out: str
    weight: str
    scale: float = 1.0
    name: ClassVar[str] = "embed"
    input_fields = ()
    weight_fields = ("weight",)


@attrs.frozen
class RmsNorm(Op):
    """out = x / sqrt(mean(x^2) + eps) * (weight + weight_offset), over groups of `group` columns.

    `group` = 0 normalises whole rows; a head size normalises each head (QK-norm).
    """

    out: str
    x: str
    weight: Optional[str]
    eps: float
    group: int = 0
    weight_offset: float = 0.0
    name: ClassVar[str] = "rms_norm"
    weight_fields = ("weight",)


@attrs.frozen
class MatMul(Op):
    """out = x @ weight.T (+ bias): weight is [out_features, in_features] in any GGML type."""

    out: str
    x: str
    weight: str
    bias: Optional[str] = None
    name: ClassVar[str] = "matmul"
    weight_fields = ("weight", "bias")


@attrs.frozen
class Add(Op):
    """out = a + b (same shape)."""

    out: str
    a: str
    b: str
    name: ClassVar[str] = "add"
    input_fields = ("a", "b")


@attrs.frozen
class Mul(Op):
    """out = a * b (same shape)."""

    out: str
    a: str
    b: str
    name: ClassVar[str] = "mul"
    input_fields = ("a", "b")


@attrs.frozen
class Scale(Op):
    """out = x * factor."""

    out: str
    x: str
    factor: float
    name: ClassVar[str] = "scale"


@attrs.frozen
class Rope(Op):
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
    name: ClassVar[str] = "rope"


@attrs.frozen
class KvWrite(Op):
    """Store k [T, n_kv*key_dim] and v [T, n_kv*value_dim] of `layer` at the batch positions."""

    layer: int
    k: str
    v: str
    name: ClassVar[str] = "kv_write"
    input_fields = ("k", "v")
    output_fields = ()


@attrs.frozen
class Attention(Op):
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
    name: ClassVar[str] = "attention"
    input_fields = ("q",)


@attrs.frozen
class SiluMul(Op):
    """out = silu(gate) * up (SwiGLU)."""

    out: str
    gate: str
    up: str
    name: ClassVar[str] = "silu_mul"
    input_fields = ("gate", "up")


@attrs.frozen
class GeluMul(Op):
    """out = gelu_tanh(gate) * up (GeGLU)."""

    out: str
    gate: str
    up: str
    name: ClassVar[str] = "gelu_mul"
    input_fields = ("gate", "up")


@attrs.frozen
class Softcap(Op):
    """out = cap * tanh(x / cap)."""

    out: str
    x: str
    cap: float
    name: ClassVar[str] = "softcap"


@attrs.frozen
class SelectRows(Op):
    """out = x[batch.logit_rows]: keep only the rows whose logits are wanted."""

    out: str
    x: str
    name: ClassVar[str] = "select_rows"


@attrs.frozen
class RopeTable(Op):
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
    name: ClassVar[str] = "rope_table"


@attrs.frozen
class Columns(Op):
    """out = x[:, start:start + width]: one part of a fused projection (phi3's qkv, gate_up)."""

    out: str
    x: str
    start: int
    width: int
    name: ClassVar[str] = "columns"


@attrs.frozen
class Moe(Op):
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
    name: ClassVar[str] = "moe"
    weight_fields = ("router", "gate_exps", "up_exps", "down_exps")


@attrs.frozen
class Input(Op):
    """out = batch.inputs[out]: an activation [rows, width] handed in by the engine.

    Plumbing for graph splits (llamay_core/engine/split.py): a segment of the graph running on
    another backend produced this value. Not part of any model graph; a backend that declares
    `input` and `export` can share a graph with the fallback backend.
    """

    out: str
    width: int
    name: ClassVar[str] = "input"
    input_fields = ()


@attrs.frozen
class Export(Op):
    """batch.outputs[x] = x as a float32 host array: a value a later graph segment needs."""

    x: str
    name: ClassVar[str] = "export"
    output_fields = ()


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
