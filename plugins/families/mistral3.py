"""The `mistral3` family (Ministral 3, Mistral Small 3.x text): the llama block, normal rope,
YaRN whose betas and log multiplier come from `rope.scaling.yarn_*`, optional `rope_freqs`.

Llama 4 style attention temperature tuning (`attention.temperature_scale`) is refused."""
from __future__ import annotations

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import FamilyInfo
from llamay_families.base import LlamaVariant, llama_like_spec, read_hparams


def build(gguf: GGUFFile) -> ModelSpec:
    if float(gguf.arch_value("attention.temperature_scale", 0.0) or 0.0) != 0.0:
        raise ModelFileError(gguf.path, "unsupported mistral3.attention.temperature_scale "
                                        "(attention temperature tuning is not implemented)")
    hp = read_hparams(gguf, rope_mode="normal")
    variant = LlamaVariant(rope_factors="rope_freqs.weight", yarn_keys=True)
    return llama_like_spec(gguf, hp, variant)

@hookimpl
def llamay_register_families(register):
    register(FamilyInfo(architectures=("mistral3",), builder="llamay_families.mistral3:build"))
