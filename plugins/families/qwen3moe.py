"""The `qwen3moe` family (Qwen3-MoE): qwen3's attention, an expert feed-forward.

Top-k of the softmax over experts, the chosen weights renormalised to sum to one."""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams


def build(gguf: GGUFFile) -> ModelSpec:
    variant = LlamaVariant(qk_norm="head", moe=True, moe_normalize=True)
    return llama_like_spec(gguf, read_hparams(gguf, rope_mode="neox"), variant)

@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("qwen3moe",), builder="llamay_families.qwen3moe:build"))
