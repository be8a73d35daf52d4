"""The `llama` family (Llama 2/3, SmolLM2, Mistral-style dense models): normal rope, no biases."""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import build_llama_like, read_hparams, rope_freq_scale, weight_shapes


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="normal")
    biases = "blk.0.attn_q.bias" in gguf.tensors
    graph = build_llama_like(gguf, hp, biases=biases, freq_scale=rope_freq_scale(gguf))
    return ModelSpec(hparams=hp, graph=graph, tensor_shapes=weight_shapes(hp, biases))


@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("llama",), builder="llamay_families.llama:build"))
