"""The `qwen2` family (Qwen2, Qwen2.5): neox rope and biases on the q/k/v projections."""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams


def build(gguf: GGUFFile) -> ModelSpec:
    return llama_like_spec(gguf, read_hparams(gguf, rope_mode="neox"), LlamaVariant(biases=True))


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("qwen2",), builder="llamay_families.qwen2:build"))
