"""The `olmoe` family (OLMoE): llama block with a full-width RMS norm of q and k, neox rope,
and an expert feed-forward whose top-k softmax weights are used as they are (not renormalised)."""
from __future__ import annotations

import attrs

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams


def build(gguf: GGUFFile) -> ModelSpec:
    variant = LlamaVariant(qk_norm="full", moe=True, moe_normalize=False)
    hp = attrs.evolve(read_hparams(gguf, rope_mode="neox"), tied_embeddings=False)  # as llama.cpp: output.weight required
    return llama_like_spec(gguf, hp, variant)

@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("olmoe",), builder="llamay_families.olmoe:build"))
