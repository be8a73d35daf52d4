"""The `olmo2` family (OLMo 2): no pre-norms; attention and feed-forward outputs are RMS-normed
(`post_attention_norm`, `post_ffw_norm`) before their residual add; q and k get a full-width
RMS norm before neox rope. Sliding-window files (OLMo 3) are refused.
"""
from __future__ import annotations

import attrs

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.graph import Graph, GraphBuilder
from llamay_core.graph.model_spec import Hyperparameters, ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, n_rot_of, read_hparams, weight_shapes
from llamay_families.rope_scaling import read_rope


def build(gguf: GGUFFile) -> ModelSpec:
    if int(gguf.arch_value("attention.sliding_window", 0) or 0):
        raise ModelFileError(gguf.path, "unsupported olmo2.attention.sliding_window (OLMo 3 sliding-window layers)")
    hp = attrs.evolve(read_hparams(gguf, rope_mode="neox"), tied_embeddings=False)  # as llama.cpp: output.weight required
    shapes = weight_shapes(gguf, hp, LlamaVariant(qk_norm="full"))
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        del shapes[p + "attn_norm.weight"], shapes[p + "ffn_norm.weight"]
        shapes.update({p + "post_attention_norm.weight": (hp.n_embd,), p + "post_ffw_norm.weight": (hp.n_embd,)})
    return ModelSpec(hparams=hp, graph=_graph(gguf, hp), tensor_shapes=shapes)


def _graph(gguf: GGUFFile, hp: Hyperparameters) -> Graph:
    g = GraphBuilder()
    rope = read_rope(gguf, "neox", n_rot_of(gguf, hp), hp.rope_base)
    eps = hp.norm_eps
    x = g.embed("token_embd.weight")
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        q = g.rms_norm(g.matmul(x, p + "attn_q.weight"), p + "attn_q_norm.weight", eps)
        k = g.rms_norm(g.matmul(x, p + "attn_k.weight"), p + "attn_k_norm.weight", eps)
        v = g.matmul(x, p + "attn_v.weight")
        q = rope.apply(g, q, hp.n_heads, hp.key_dim)
        k = rope.apply(g, k, hp.n_kv_heads, hp.key_dim)
        g.kv_write(i, k, v)
        a = g.attention(q, i, n_heads=hp.n_heads, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim,
                        value_dim=hp.value_dim, scale=hp.key_dim ** -0.5)
        x = g.add(x, g.rms_norm(g.matmul(a, p + "attn_output.weight"), p + "post_attention_norm.weight", eps))
        m = g.silu_mul(g.matmul(x, p + "ffn_gate.weight"), g.matmul(x, p + "ffn_up.weight"))
        x = g.add(x, g.rms_norm(g.matmul(m, p + "ffn_down.weight"), p + "post_ffw_norm.weight", eps))
    x = g.select_rows(x)
    x = g.rms_norm(x, "output_norm.weight", eps)
    return g.finish(g.matmul(x, "token_embd.weight" if hp.tied_embeddings else "output.weight"), hp.n_vocab)


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("olmo2",), builder="llamay_families.olmo2:build"))
