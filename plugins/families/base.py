"""Shared plumbing for decoder-only transformer families: hyperparameters and the layer graph.

Tensor names are the GGUF's own (`blk.N.attn_q.weight`), so loading needs no mapping table.
"""
from __future__ import annotations

from typing import Any

import attrs

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.graph import Graph, GraphBuilder
from llamay_core.graph.model_spec import Hyperparameters, ModelSpec
from llamay_families.rope_scaling import read_rope


def require(gguf: GGUFFile, key: str) -> Any:
    value = gguf.arch_value(key)
    if value is None:
        raise ModelFileError(gguf.path, f"missing metadata key {gguf.architecture}.{key}")
    return value


def read_hparams(gguf: GGUFFile, rope_mode: str) -> Hyperparameters:
    n_embd = int(require(gguf, "embedding_length"))
    n_heads = int(require(gguf, "attention.head_count"))
    n_kv = int(gguf.arch_value("attention.head_count_kv", n_heads))
    key_dim = int(gguf.arch_value("attention.key_length", n_embd // n_heads))
    value_dim = int(gguf.arch_value("attention.value_length", key_dim))
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    embd = gguf.tensors.get("token_embd.weight")
    n_vocab = int(gguf.arch_value("vocab_size", 0) or (len(tokens) if tokens else 0)
                  or (embd.shape[0] if embd is not None else 0))
    return Hyperparameters(
        architecture=gguf.architecture,
        n_layers=int(require(gguf, "block_count")),
        n_embd=n_embd,
        # expert-only files may give just the experts' width, which llama.cpp accepts
        n_ff=int(gguf.arch_value("feed_forward_length", 0) or gguf.arch_value("expert_feed_forward_length", 0)
                 or require(gguf, "feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        key_dim=key_dim,
        value_dim=value_dim,
        n_vocab=n_vocab,
        context_length=int(gguf.arch_value("context_length", 2048)),
        rope_base=float(gguf.arch_value("rope.freq_base", 10000.0)),
        rope_mode=rope_mode,
        norm_eps=float(gguf.arch_value("attention.layer_norm_rms_epsilon", 1e-5)),
        tied_embeddings="output.weight" not in gguf.tensors,
    )


def rope_freq_scale(gguf: GGUFFile) -> float:
    """Linear rope scaling from the GGUF (`rope.scaling.type` linear, `.factor`)."""
    kind = gguf.arch_value("rope.scaling.type", "none") or "none"
    factor = float(gguf.arch_value("rope.scaling.factor", 0.0) or 0.0)
    if kind in ("none", "") or factor in (0.0, 1.0):
        return 1.0
    if kind == "linear":
        return 1.0 / factor
    raise ModelFileError(gguf.path, f"unsupported rope scaling type {kind!r}")


@attrs.frozen
class LlamaVariant:
    """What a llama-like family changes in the block. Defaults are plain llama."""

    biases: bool = False  # q/k/v biases (qwen2)
    qk_norm: str = ""  # RMS norm of q and k before rope: "head" (qwen3) or "full" width (olmoe)
    fused_qkv: bool = False  # one attn_qkv projection, q|k|v by rows (phi3)
    fused_gate_up: bool = False  # one ffn_up projection of 2*n_ff rows, gate then up (phi3)
    rope_factors: str | None = None  # the tensor of per-pair rope divisors, when the family reads one
    yarn_keys: bool = False  # the family reads rope.scaling.yarn_beta_* and yarn_log_multiplier (mistral3)
    embedding_scale: float = 1.0  # granite's multipliers
    attention_scale: float = 0.0  # 0: 1/sqrt(head dim)
    residual_scale: float = 1.0
    logit_scale: float = 1.0  # logits are divided by it
    moe: bool = False  # expert feed-forward (ffn_*_exps), routed by ffn_gate_inp
    moe_normalize: bool = True  # renormalise the chosen experts' weights


def n_rot_of(gguf: GGUFFile, hp: Hyperparameters) -> int:
    return int(gguf.arch_value("rope.dimension_count", hp.key_dim))


def weight_shapes(gguf: GGUFFile, hp: Hyperparameters, v: LlamaVariant) -> dict[str, tuple[int, ...]]:
    """Every tensor a llama-like model reads, with its (rows, cols) shape."""
    d, ff = hp.n_embd, hp.n_ff
    q_out, kv_k, kv_v = hp.n_heads * hp.key_dim, hp.n_kv_heads * hp.key_dim, hp.n_kv_heads * hp.value_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (hp.n_vocab, d), "output_norm.weight": (d,)}
    if not hp.tied_embeddings:
        shapes["output.weight"] = (hp.n_vocab, d)
    if v.rope_factors and v.rope_factors in gguf.tensors:
        shapes[v.rope_factors] = (n_rot_of(gguf, hp) // 2,)
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (d,), p + "attn_output.weight": (d, hp.n_heads * hp.value_dim),
                       p + "ffn_norm.weight": (d,)})
        if v.fused_qkv:
            shapes[p + "attn_qkv.weight"] = (q_out + kv_k + kv_v, d)
        else:
            shapes.update({p + "attn_q.weight": (q_out, d), p + "attn_k.weight": (kv_k, d),
                           p + "attn_v.weight": (kv_v, d)})
        if v.qk_norm:
            q_w, k_w = (hp.key_dim, hp.key_dim) if v.qk_norm == "head" else (q_out, kv_k)
            shapes.update({p + "attn_q_norm.weight": (q_w,), p + "attn_k_norm.weight": (k_w,)})
        if v.moe:
            n_exp, ff_exp = moe_sizes(gguf, hp)[:2]
            shapes.update({p + "ffn_gate_inp.weight": (n_exp, d), p + "ffn_gate_exps.weight": (n_exp, ff_exp, d),
                           p + "ffn_up_exps.weight": (n_exp, ff_exp, d), p + "ffn_down_exps.weight": (n_exp, d, ff_exp)})
        elif v.fused_gate_up:
            shapes.update({p + "ffn_up.weight": (2 * ff, d), p + "ffn_down.weight": (d, ff)})
        else:
            shapes.update({p + "ffn_gate.weight": (ff, d), p + "ffn_up.weight": (ff, d), p + "ffn_down.weight": (d, ff)})
        if v.biases:
            shapes.update({p + "attn_q.bias": (q_out,), p + "attn_k.bias": (kv_k,), p + "attn_v.bias": (kv_v,)})
    return shapes


def moe_sizes(gguf: GGUFFile, hp: Hyperparameters) -> tuple[int, int, int]:
    """(experts, expert feed-forward width, experts used per token) from the metadata."""
    n_exp = int(require(gguf, "expert_count"))
    n_used = int(require(gguf, "expert_used_count"))
    ff_exp = int(gguf.arch_value("expert_feed_forward_length", 0) or hp.n_ff)
    if not 0 < n_used <= n_exp:
        raise ModelFileError(gguf.path, f"expert_used_count {n_used} must be in 1..expert_count ({n_exp})")
    return n_exp, ff_exp, n_used


def llama_like_spec(gguf: GGUFFile, hp: Hyperparameters, variant: LlamaVariant) -> ModelSpec:
    return ModelSpec(hparams=hp, graph=build_llama_like(gguf, hp, variant),
                     tensor_shapes=weight_shapes(gguf, hp, variant))


def build_llama_like(gguf: GGUFFile, hp: Hyperparameters, v: LlamaVariant) -> Graph:
    """The llama block: pre-norm attention with rope and GQA, then a SwiGLU (or expert) feed-forward."""
    g = GraphBuilder()
    rope = read_rope(gguf, hp.rope_mode, n_rot_of(gguf, hp), hp.rope_base, factors=v.rope_factors,
                     yarn_keys=v.yarn_keys)
    q_out, kv_k = hp.n_heads * hp.key_dim, hp.n_kv_heads * hp.key_dim
    x = g.embed("token_embd.weight", scale=v.embedding_scale)
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        h = g.rms_norm(x, p + "attn_norm.weight", hp.norm_eps)
        if v.fused_qkv:
            qkv = g.matmul(h, p + "attn_qkv.weight")
            q = g.columns(qkv, 0, q_out)
            k = g.columns(qkv, q_out, kv_k)
            val = g.columns(qkv, q_out + kv_k, hp.n_kv_heads * hp.value_dim)
        else:
            q = g.matmul(h, p + "attn_q.weight", p + "attn_q.bias" if v.biases else None)
            k = g.matmul(h, p + "attn_k.weight", p + "attn_k.bias" if v.biases else None)
            val = g.matmul(h, p + "attn_v.weight", p + "attn_v.bias" if v.biases else None)
        if v.qk_norm:
            group = hp.key_dim if v.qk_norm == "head" else 0
            q = g.rms_norm(q, p + "attn_q_norm.weight", hp.norm_eps, group=group)
            k = g.rms_norm(k, p + "attn_k_norm.weight", hp.norm_eps, group=group)
        q = rope.apply(g, q, hp.n_heads, hp.key_dim)
        k = rope.apply(g, k, hp.n_kv_heads, hp.key_dim)
        g.kv_write(i, k, val)
        a = g.attention(q, i, n_heads=hp.n_heads, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim,
                        value_dim=hp.value_dim, scale=v.attention_scale or hp.key_dim ** -0.5)
        a = g.matmul(a, p + "attn_output.weight")
        x = g.add(x, a if v.residual_scale == 1.0 else g.scale(a, v.residual_scale))
        h = g.rms_norm(x, p + "ffn_norm.weight", hp.norm_eps)
        if v.moe:
            n_exp, _, n_used = moe_sizes(gguf, hp)
            f = g.moe(h, router=p + "ffn_gate_inp.weight", gate_exps=p + "ffn_gate_exps.weight",
                      up_exps=p + "ffn_up_exps.weight", down_exps=p + "ffn_down_exps.weight",
                      n_experts=n_exp, n_used=n_used, normalize=v.moe_normalize)
        else:
            if v.fused_gate_up:
                gate_up = g.matmul(h, p + "ffn_up.weight")
                m = g.silu_mul(g.columns(gate_up, 0, hp.n_ff), g.columns(gate_up, hp.n_ff, hp.n_ff))
            else:
                m = g.silu_mul(g.matmul(h, p + "ffn_gate.weight"), g.matmul(h, p + "ffn_up.weight"))
            f = g.matmul(m, p + "ffn_down.weight")
        x = g.add(x, f if v.residual_scale == 1.0 else g.scale(f, v.residual_scale))
    x = g.select_rows(x)
    x = g.rms_norm(x, "output_norm.weight", hp.norm_eps)
    logits = g.matmul(x, "token_embd.weight" if hp.tied_embeddings else "output.weight")
    if v.logit_scale != 1.0:
        logits = g.scale(logits, 1.0 / v.logit_scale)
    return g.finish(logits, hp.n_vocab)
