"""The `qwen2` family (Qwen2, Qwen2.5): neox rope and biases on the q/k/v projections."""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import build_llama_like, read_hparams, rope_freq_scale, weight_shapes


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="neox")
    graph = build_llama_like(gguf, hp, biases=True, freq_scale=rope_freq_scale(gguf))
    return ModelSpec(hparams=hp, graph=graph, tensor_shapes=weight_shapes(hp, True))


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("qwen2",), builder="llamay_families.qwen2:build"))
