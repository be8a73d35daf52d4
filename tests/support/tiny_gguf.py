"""Small but complete GGUF files written with gguf.GGUFWriter, for fast tests and bad-file cases."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from llamay_core.engine.chat_template import CHATML


def byte_level_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: 256 single-character tokens, one per byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    mapping = dict(zip(keep, chars))
    return [chr(mapping[b]) for b in range(256)]


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
MERGES = ["Ġ t", "h e", "Ġt he"]
MERGED = ["Ġt", "he", "Ġthe"]


def write_tiny_llama(path: Path, *, arch: str = "llama", n_layers: int = 2, d: int = 128, ff: int = 128,
                     n_heads: int = 4, n_kv: int = 2, weight_type: GGMLQuantizationType = GGMLQuantizationType.Q8_0,
                     seed: int = 0, tied: bool = True, biases: bool = False,
                     mutate: Callable[[dict[str, np.ndarray]], None] | None = None,
                     drop: tuple[str, ...] = (), extra_meta: dict | None = None) -> Path:
    """A random-weight llama-style model with a byte-level BPE tokenizer (vocab 263)."""
    rng = np.random.default_rng(seed)
    tokens = byte_level_tokens() + MERGED + SPECIALS
    vocab = len(tokens)
    head = d // n_heads
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (256 + len(MERGED)) + [3] * len(SPECIALS))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(vocab - 4)
    w.add_eos_token_id(vocab - 2)
    w.add_add_bos_token(False)
    # Its vocabulary has ChatML's markers, and a GGUF without a template gets no silent ChatML.
    if "tokenizer.chat_template" not in (extra_meta or {}):
        w.add_chat_template(CHATML)
    for key, value in (extra_meta or {}).items():
        w.add_string(key, value) if isinstance(value, str) else w.add_uint32(key, value)

    tensors: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((vocab, d)).astype(np.float32) * 0.5,
                                      "output_norm.weight": np.ones(d, np.float32)}
    if not tied:
        tensors["output.weight"] = rng.standard_normal((vocab, d)).astype(np.float32) * 0.1
    for i in range(n_layers):
        p = f"blk.{i}."
        scale = 1.0 / np.sqrt(d)
        tensors.update({
            p + "attn_norm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            p + "attn_q.weight": rng.standard_normal((n_heads * head, d)).astype(np.float32) * scale,
            p + "attn_k.weight": rng.standard_normal((n_kv * head, d)).astype(np.float32) * scale,
            p + "attn_v.weight": rng.standard_normal((n_kv * head, d)).astype(np.float32) * scale,
            p + "attn_output.weight": rng.standard_normal((d, n_heads * head)).astype(np.float32) * scale,
            p + "ffn_norm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            p + "ffn_gate.weight": rng.standard_normal((ff, d)).astype(np.float32) * scale,
            p + "ffn_up.weight": rng.standard_normal((ff, d)).astype(np.float32) * scale,
            p + "ffn_down.weight": rng.standard_normal((d, ff)).astype(np.float32) / np.sqrt(ff),
        })
        if biases:
            tensors.update({p + "attn_q.bias": 0.1 * rng.standard_normal(n_heads * head).astype(np.float32),
                            p + "attn_k.bias": 0.1 * rng.standard_normal(n_kv * head).astype(np.float32),
                            p + "attn_v.bias": 0.1 * rng.standard_normal(n_kv * head).astype(np.float32)})
    if mutate:
        mutate(tensors)
    for name, arr in tensors.items():
        if name in drop:
            continue
        if arr.ndim == 2 and weight_type not in (GGMLQuantizationType.F32,):
            if weight_type == GGMLQuantizationType.F16:
                w.add_tensor(name, arr.astype(np.float16))
            else:
                q = quantize(arr, weight_type)
                w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=weight_type)
        else:
            w.add_tensor(name, arr if arr.dtype != np.float64 else arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
