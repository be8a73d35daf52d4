"""Shared plumbing for decoder-only transformer families: hyperparameters and the layer graph.

Tensor names are the GGUF's own (`blk.N.attn_q.weight`), so loading needs no mapping table.
"""
from __future__ import annotations

from typing import Any

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.graph import Graph, GraphBuilder
from llamay_core.graph.model_spec import Hyperparameters


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
        n_ff=int(require(gguf, "feed_forward_length")),
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


def weight_shapes(hp: Hyperparameters, biases: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor a llama-like model reads, with its (rows, cols) shape."""
    d, ff = hp.n_embd, hp.n_ff
    q_out, kv_k, kv_v = hp.n_heads * hp.key_dim, hp.n_kv_heads * hp.key_dim, hp.n_kv_heads * hp.value_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (hp.n_vocab, d), "output_norm.weight": (d,)}
    if not hp.tied_embeddings:
        shapes["output.weight"] = (hp.n_vocab, d)
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        shapes.update({
            p + "attn_norm.weight": (d,),
            p + "attn_q.weight": (q_out, d),
            p + "attn_k.weight": (kv_k, d),
            p + "attn_v.weight": (kv_v, d),
            p + "attn_output.weight": (d, hp.n_heads * hp.value_dim),
            p + "ffn_norm.weight": (d,),
            p + "ffn_gate.weight": (ff, d),
            p + "ffn_up.weight": (ff, d),
            p + "ffn_down.weight": (d, ff),
        })
        if biases:
            shapes.update({p + "attn_q.bias": (q_out,), p + "attn_k.bias": (kv_k,), p + "attn_v.bias": (kv_v,)})
    return shapes


def build_llama_like(gguf: GGUFFile, hp: Hyperparameters, biases: bool, freq_scale: float) -> Graph:
    """The llama block: pre-norm attention with rope and GQA, then a SwiGLU feed-forward."""
    g = GraphBuilder()
    n_rot = int(gguf.arch_value("rope.dimension_count", hp.key_dim))
    x = g.embed("token_embd.weight")
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        h = g.rms_norm(x, p + "attn_norm.weight", hp.norm_eps)
        q = g.matmul(h, p + "attn_q.weight", p + "attn_q.bias" if biases else None)
        k = g.matmul(h, p + "attn_k.weight", p + "attn_k.bias" if biases else None)
        v = g.matmul(h, p + "attn_v.weight", p + "attn_v.bias" if biases else None)
        rope = dict(head_dim=hp.key_dim, n_rot=n_rot, mode=hp.rope_mode, base=hp.rope_base, freq_scale=freq_scale)
        q = g.rope(q, n_heads=hp.n_heads, **rope)
        k = g.rope(k, n_heads=hp.n_kv_heads, **rope)
        g.kv_write(i, k, v)
        a = g.attention(q, i, n_heads=hp.n_heads, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim,
                        value_dim=hp.value_dim, scale=hp.key_dim ** -0.5)
        x = g.add(x, g.matmul(a, p + "attn_output.weight"))
        h = g.rms_norm(x, p + "ffn_norm.weight", hp.norm_eps)
        m = g.silu_mul(g.matmul(h, p + "ffn_gate.weight"), g.matmul(h, p + "ffn_up.weight"))
        x = g.add(x, g.matmul(m, p + "ffn_down.weight"))
    x = g.select_rows(x)
    x = g.rms_norm(x, "output_norm.weight", hp.norm_eps)
    logits = g.matmul(x, "token_embd.weight" if hp.tied_embeddings else "output.weight")
    return g.finish(logits, hp.n_vocab)
