"""The `phi3` family (Phi-3, Phi-3.5, Phi-4-mini): fused projections, neox rope, partial rotary.

`attn_qkv` holds q, k and v by rows and `ffn_up` holds gate then up (2 * n_ff rows); the graph
takes each part as a column slice of the one matmul. Long-context files carry two rope factor
tensors; llama.cpp uses `rope_factors_short` while the context fits the original training
length, and so does llamay, whose context is capped there (`rope_factors_long` is checked,
not used).
"""
from __future__ import annotations

import attrs

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, n_rot_of, read_hparams

SHORT, LONG = "rope_factors_short.weight", "rope_factors_long.weight"


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="neox")
    if LONG in gguf.tensors:
        original = int(gguf.arch_value("rope.scaling.original_context_length", 0) or hp.context_length)
        hp = attrs.evolve(hp, context_length=min(hp.context_length, original))
    variant = LlamaVariant(fused_qkv="blk.0.attn_qkv.weight" in gguf.tensors, fused_gate_up=True, rope_factors=SHORT)
    spec = llama_like_spec(gguf, hp, variant)
    if LONG in gguf.tensors:
        spec = attrs.evolve(spec, tensor_shapes={**spec.tensor_shapes, LONG: (n_rot_of(gguf, hp) // 2,)})
    return spec


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("phi3",), builder="llamay_families.phi3:build"))
