"""The `llama` family (Llama 2/3.x, SmolLM2, Mistral, Mixtral): normal rope.

Llama 3.x files carry a `rope_freqs` tensor: per-pair divisors of the rotary frequencies.
Mixtral-style files (`ffn_gate_inp` plus 3-D `ffn_*_exps`) get the expert feed-forward,
the chosen experts' weights renormalised.
"""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="normal")
    variant = LlamaVariant(biases="blk.0.attn_q.bias" in gguf.tensors, rope_factors="rope_freqs.weight",
                           moe="blk.0.ffn_gate_inp.weight" in gguf.tensors)
    return llama_like_spec(gguf, hp, variant)


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("llama",), builder="llamay_families.llama:build"))
