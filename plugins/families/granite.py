"""The `granite` family (IBM Granite 3.x dense): llama with four multipliers from the metadata.

`embedding_scale` multiplies the embeddings, `residual_scale` each block's attention and
feed-forward output before its residual add, `attention.scale` replaces 1/sqrt(head dim), and
the logits are divided by `logit_scale`."""
from __future__ import annotations

from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams, require


def build(gguf: GGUFFile) -> ModelSpec:
    hp = read_hparams(gguf, rope_mode="normal")
    variant = LlamaVariant(
        rope_factors="rope_freqs.weight",
        embedding_scale=float(gguf.arch_value("embedding_scale", 0.0) or 1.0),
        attention_scale=float(gguf.arch_value("attention.scale", 0.0) or 0.0),
        residual_scale=float(gguf.arch_value("residual_scale", 0.0) or 1.0),
        logit_scale=float(require(gguf, "logit_scale")),
    )
    return llama_like_spec(gguf, hp, variant)

@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("granite",), builder="llamay_families.granite:build"))
