"""Tiny random-weight GGUFs of every family, written with gguf.GGUFWriter the way convert_hf_to_gguf
writes real ones: the real tensor names, shapes (3-D experts included) and metadata keys.

The weights are scaled so the logits are peaked enough for a top-1 comparison to mean
something (std ~3 over the vocabulary) and flat enough for a perplexity to be more than 1:
projections of std 1/sqrt(fan-in), the output matrix of std 3/sqrt(n_embd).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

from llamay_conformance.weights import random_tensor
from tests.support.tiny_gguf import MERGED, MERGES, SPECIALS, byte_level_tokens

ROPE_MODE = {"llama": "normal", "mistral3": "normal", "granite": "normal", "qwen3": "neox", "qwen3moe": "neox",
             "olmoe": "neox", "olmo2": "neox", "phi3": "neox", "qwen2": "neox"}
LOGIT_STD = 3.0
UNTIED = ("olmo2", "olmoe")  # llama.cpp requires their output.weight
QUANTIZABLE = ("F32", "F16", "Q8_0", "Q4_0", "Q5_0", "MXFP4")
# std of a random raw block per unit of `random_tensor`'s scale (its table values and sub-scales)
RAW_BLOCK_GAIN = {"IQ4_NL": 65.0, "IQ4_XS": 65.0 * 18.0}


def _add_meta(w: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        raise TypeError(f"{key}: {value!r}")


def _tokenizer(w: GGUFWriter, tokenizer_from: Path | None) -> int:
    """Write a tokenizer: the byte-level one of tiny_gguf, or every tokenizer.* key of a real file."""
    if tokenizer_from is None:
        tokens = byte_level_tokens() + MERGED + SPECIALS
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types([1] * (256 + len(MERGED)) + [3] * len(SPECIALS))
        w.add_token_merges(MERGES)
        w.add_bos_token_id(len(tokens) - 4)
        w.add_eos_token_id(len(tokens) - 2)
        w.add_add_bos_token(False)
        return len(tokens)
    reader = GGUFReader(tokenizer_from)
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                values = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, values)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        elif kind == GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], kind)
    return n_vocab


def _store(w: GGUFWriter, name: str, arr: np.ndarray, type_name: str, rng: np.random.Generator) -> None:
    if arr.ndim == 1 or type_name == "F32":
        w.add_tensor(name, arr.astype(np.float32))
    elif type_name == "F16":
        w.add_tensor(name, arr.astype(np.float16))
    elif type_name in QUANTIZABLE:
        q = quantize(arr, GGMLQuantizationType[type_name])
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType[type_name])
    else:  # no quantizer in gguf-py: random blocks with the tensor's std (its values are the test's weights)
        t = random_tensor(name, type_name, arr.shape, rng, scale=float(arr.std()) / RAW_BLOCK_GAIN[type_name] * 64)
        raw = t.data.reshape(*arr.shape[:-1], -1)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[type_name])


def write_family_gguf(path: Path, arch: str, *, seed: int = 0, n_layers: int = 2, d: int = 64, n_heads: int = 4,
                      n_kv: int = 2, head_dim: int | None = None, ff: int = 128, n_rot: int | None = None,
                      weight_type: str = "F32", tied: bool = True, context_length: int = 1024,
                      rope_freqs: bool = False, meta: dict[str, Any] | None = None, n_experts: int = 4,
                      n_used: int = 2, tokenizer_from: Path | None = None, chat_template: str | None = None,
                      extra_tensors: dict[str, np.ndarray] | None = None, proj_gain: float = 1.0,
                      moe: bool | None = None) -> Path:
    """A random model of `arch` with real tensor names and metadata; see the module docstring.

    `proj_gain` scales every projection: below 1 the blocks perturb the residual stream less, so
    a small error (8-bit activations) is not amplified layer after layer."""
    rng = np.random.default_rng(seed)
    head = head_dim or d // n_heads
    q_out, kv_out = n_heads * head, n_kv * head
    rot = n_rot or head
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(context_length)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    if head_dim:
        w.add_key_length(head)
        w.add_value_length(head)
    if n_rot or arch == "phi3":
        w.add_rope_dimension_count(rot)
    moe = arch in ("qwen3moe", "olmoe") if moe is None else moe  # llama with experts: Mixtral
    if moe:
        w.add_expert_count(n_experts)
        w.add_expert_used_count(n_used)
        w.add_expert_feed_forward_length(ff)
    if arch == "granite":
        for key, value in (("embedding_scale", 2.0), ("residual_scale", 0.5), ("attention.scale", 0.125),
                           ("logit_scale", 2.0)):
            _add_meta(w, f"granite.{key}", value)
    for key, value in (meta or {}).items():
        _add_meta(w, f"{arch}.{key}", value)
    n_vocab = _tokenizer(w, tokenizer_from)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def mat(rows: int, cols: int, *lead: int) -> np.ndarray:
        return (proj_gain * rng.standard_normal((*lead, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t: dict[str, np.ndarray] = {"token_embd.weight": LOGIT_STD / np.sqrt(d) * rng.standard_normal((n_vocab, d)).astype(np.float32),
                                "output_norm.weight": norm(d)}
    if not tied or arch in UNTIED:
        t["output.weight"] = LOGIT_STD / np.sqrt(d) * rng.standard_normal((n_vocab, d)).astype(np.float32)
    if rope_freqs:  # from their own generator: the other weights stay those of the same file without them
        frng = np.random.default_rng(seed + 1)
        name = "rope_factors_short.weight" if arch == "phi3" else "rope_freqs.weight"
        t[name] = np.exp(frng.uniform(0.0, 2.0, rot // 2)).astype(np.float32)
        if arch == "phi3":
            t["rope_factors_long.weight"] = np.exp(frng.uniform(0.0, 3.0, rot // 2)).astype(np.float32)
    for i in range(n_layers):
        p = f"blk.{i}."
        if arch == "olmo2":
            t[p + "post_attention_norm.weight"] = norm(d)
            t[p + "post_ffw_norm.weight"] = norm(d)
        else:
            t[p + "attn_norm.weight"] = norm(d)
            t[p + "ffn_norm.weight"] = norm(d)
        if arch == "phi3":
            t[p + "attn_qkv.weight"] = mat(q_out + 2 * kv_out, d)
        else:
            t[p + "attn_q.weight"] = mat(q_out, d)
            t[p + "attn_k.weight"] = mat(kv_out, d)
            t[p + "attn_v.weight"] = mat(kv_out, d)
        t[p + "attn_output.weight"] = mat(d, q_out)
        if arch in ("qwen3", "qwen3moe"):
            t[p + "attn_q_norm.weight"] = norm(head)
            t[p + "attn_k_norm.weight"] = norm(head)
        elif arch in ("olmo2", "olmoe"):
            t[p + "attn_q_norm.weight"] = norm(q_out)
            t[p + "attn_k_norm.weight"] = norm(kv_out)
        if moe:
            t[p + "ffn_gate_inp.weight"] = mat(n_experts, d) * 4
            t[p + "ffn_gate_exps.weight"] = mat(ff, d, n_experts)
            t[p + "ffn_up_exps.weight"] = mat(ff, d, n_experts)
            t[p + "ffn_down_exps.weight"] = mat(d, ff, n_experts)
        elif arch == "phi3":
            t[p + "ffn_up.weight"] = mat(2 * ff, d)
            t[p + "ffn_down.weight"] = mat(d, ff)
        else:
            t[p + "ffn_gate.weight"] = mat(ff, d)
            t[p + "ffn_up.weight"] = mat(ff, d)
            t[p + "ffn_down.weight"] = mat(d, ff)
    t.update(extra_tensors or {})
    for name, arr in t.items():
        keep_f32 = name in ("token_embd.weight", "output.weight") or name.endswith("gate_inp.weight")
        _store(w, name, arr, "F32" if keep_f32 else weight_type, rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
