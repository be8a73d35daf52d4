"""The `gemma3` family (Gemma 3 text models).

Differences from llama: the embedding is scaled by sqrt(n_embd); queries and keys get a per-head
RMS norm; attention and feed-forward outputs are normed again before the residual add; GeGLU
(tanh-approximated GELU); neox rope; five sliding-window layers (window 512, rope base 10000)
to every global one (the file's rope base). The GGUF stores norm weights with Gemma's +1 folded
in, so every norm is a plain rms_norm.
"""
from __future__ import annotations

import math

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.graph import Graph, GraphBuilder
from llamay_core.graph.model_spec import Hyperparameters, ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, read_hparams, rope_freq_scale, weight_shapes

SWA_PATTERN = 6  # layers i with i % 6 < 5 use the sliding window; every sixth is global
SWA_ROPE_BASE = 10000.0


def is_sliding(layer: int) -> bool:
    return layer % SWA_PATTERN < SWA_PATTERN - 1


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="neox")
    shapes = weight_shapes(gguf, hp, LlamaVariant())
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_q_norm.weight": (hp.key_dim,), p + "attn_k_norm.weight": (hp.key_dim,),
                       p + "post_attention_norm.weight": (hp.n_embd,), p + "post_ffw_norm.weight": (hp.n_embd,)})
    return ModelSpec(hparams=hp, graph=_graph(gguf, hp), tensor_shapes=shapes)


def _graph(gguf: GGUFFile, hp: Hyperparameters) -> Graph:
    g = GraphBuilder()
    window = int(gguf.arch_value("attention.sliding_window", 0) or 0)
    freq_scale = rope_freq_scale(gguf)
    x = g.embed("token_embd.weight", scale=math.sqrt(hp.n_embd))
    eps = hp.norm_eps
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        sliding = window > 0 and is_sliding(i)
        h = g.rms_norm(x, p + "attn_norm.weight", eps)
        q = g.rms_norm(g.matmul(h, p + "attn_q.weight"), p + "attn_q_norm.weight", eps, group=hp.key_dim)
        k = g.rms_norm(g.matmul(h, p + "attn_k.weight"), p + "attn_k_norm.weight", eps, group=hp.key_dim)
        v = g.matmul(h, p + "attn_v.weight")
        rope = dict(head_dim=hp.key_dim, n_rot=hp.key_dim, mode="neox",
                    base=SWA_ROPE_BASE if sliding else hp.rope_base, freq_scale=1.0 if sliding else freq_scale)
        q = g.rope(q, n_heads=hp.n_heads, **rope)
        k = g.rope(k, n_heads=hp.n_kv_heads, **rope)
        g.kv_write(i, k, v)
        a = g.attention(q, i, n_heads=hp.n_heads, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim,
                        value_dim=hp.value_dim, scale=hp.key_dim ** -0.5, window=window if sliding else 0)
        a = g.rms_norm(g.matmul(a, p + "attn_output.weight"), p + "post_attention_norm.weight", eps)
        x = g.add(x, a)
        h = g.rms_norm(x, p + "ffn_norm.weight", eps)
        m = g.gelu_mul(g.matmul(h, p + "ffn_gate.weight"), g.matmul(h, p + "ffn_up.weight"))
        m = g.rms_norm(g.matmul(m, p + "ffn_down.weight"), p + "post_ffw_norm.weight", eps)
        x = g.add(x, m)
    x = g.select_rows(x)
    x = g.rms_norm(x, "output_norm.weight", eps)
    return g.finish(g.matmul(x, "token_embd.weight" if hp.tied_embeddings else "output.weight"), hp.n_vocab)


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("gemma3",), builder="llamay_families.gemma3:build"))
