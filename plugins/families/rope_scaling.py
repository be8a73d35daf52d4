"""Scaled rope as a GGUF describes it: `rope.scaling.*` metadata and per-dimension factor tensors.

llama.cpp's rotation angle for pair i at position p is linear in p, whatever the scaling:
theta_i = p * base^(-2i/n_rot) / factor_i * (freq_scale * (1 - ramp_i) + ramp_i), where
factor_i comes from a `rope_freqs` tensor (Llama 3.x) and ramp_i is YaRN's blend between
interpolation and extrapolation (0 unless the type is yarn). The cos/sin are multiplied by a
magnitude `mscale`. So a scaled rope is a `RopeTable` op holding one frequency per pair; an
unscaled one stays a plain `Rope`, which every backend implements.
"""
from __future__ import annotations

import math

import attrs
import numpy as np
from gguf.quants import dequantize

from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.graph import GraphBuilder

SCALING_TYPES = ("none", "linear", "yarn")
# llama.cpp's YaRN constants for the families here; files that carry other values are refused,
# since llama.cpp would not read them either (mistral3 reads the betas: `yarn_keys=True`).
YARN_DEFAULTS = {"rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0,
                 "rope.scaling.yarn_log_multiplier": 0.0, "rope.scaling.yarn_ext_factor": None,
                 "rope.scaling.yarn_attn_factor": None}


@attrs.frozen
class RopeScaling:
    """How one model rotates queries and keys: plain (`freqs` None) or a per-pair table."""

    n_rot: int
    mode: str
    base: float
    freq_scale: float = 1.0
    freqs: tuple[float, ...] | None = None
    mscale: float = 1.0

    def apply(self, g: GraphBuilder, x: str, n_heads: int, head_dim: int) -> str:
        if self.freqs is None:
            return g.rope(x, n_heads=n_heads, head_dim=head_dim, n_rot=self.n_rot, mode=self.mode,
                          base=self.base, freq_scale=self.freq_scale)
        return g.rope_table(x, n_heads=n_heads, head_dim=head_dim, n_rot=self.n_rot, mode=self.mode,
                            freqs=self.freqs, mscale=self.mscale)


def factor_tensor(gguf: GGUFFile, name: str, n_rot: int) -> np.ndarray:
    t = gguf.tensors[name]
    if tuple(t.shape) != (n_rot // 2,):
        raise ModelFileError(gguf.path, f"tensor {name} has shape {list(t.shape)}, expected [{n_rot // 2}]")
    return dequantize(t.raw_rows(), t.ggml_type).astype(np.float64).reshape(-1)


def _yarn_params(gguf: GGUFFile, yarn_keys: bool) -> tuple[float, float, float]:
    values = {}
    for key, default in YARN_DEFAULTS.items():
        value = gguf.arch_value(key)
        if value is None:
            values[key] = default
        elif yarn_keys and key in ("rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
                                   "rope.scaling.yarn_log_multiplier"):
            values[key] = float(value)
        elif default is None or float(value) != default:
            raise ModelFileError(gguf.path, f"unsupported {gguf.architecture}.{key} = {value} "
                                            f"(the {gguf.architecture} family does not use it)")
        else:
            values[key] = default
    return (values["rope.scaling.yarn_beta_fast"], values["rope.scaling.yarn_beta_slow"],
            values["rope.scaling.yarn_log_multiplier"])


def _corr_dim(n_rot: int, n_ctx_orig: int, rotations: float, base: float) -> float:
    """The pair index whose wavelength fits `rotations` turns into the original context."""
    return n_rot * math.log(n_ctx_orig / (rotations * 2 * math.pi)) / (2 * math.log(base))


def _mscale(factor: float, m: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * m * math.log(factor) + 1.0


def read_rope(gguf: GGUFFile, mode: str, n_rot: int, base: float, factors: str | None = None,
              yarn_keys: bool = False) -> RopeScaling:
    """The file's rope: `rope.scaling.type` none/linear/yarn (others refused), `.factor`,
    `.attn_factor`, `.original_context_length`, and the factor tensor `factors` when present."""
    kind = str(gguf.arch_value("rope.scaling.type", "linear") or "linear")
    if kind not in SCALING_TYPES:
        raise ModelFileError(gguf.path, f"unsupported rope scaling type {kind!r} "
                                        f"(llamay implements {', '.join(SCALING_TYPES)})")
    factor = float(gguf.arch_value("rope.scaling.factor", 0.0) or gguf.arch_value("rope.scale_linear", 0.0) or 0.0)
    freq_scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    attn_factor = float(gguf.arch_value("rope.scaling.attn_factor", 1.0))
    beta_fast, beta_slow, log_mul = _yarn_params(gguf, yarn_keys)
    ff = factor_tensor(gguf, factors, n_rot) if factors and factors in gguf.tensors else None
    if kind != "yarn" and ff is None and attn_factor == 1.0:
        return RopeScaling(n_rot=n_rot, mode=mode, base=base, freq_scale=freq_scale)
    i = np.arange(n_rot // 2, dtype=np.float64)
    freqs = base ** (-2.0 * i / n_rot)
    if ff is not None:
        freqs = freqs / ff
    mscale = attn_factor
    if kind == "yarn":
        n_ctx_orig = int(gguf.arch_value("rope.scaling.original_context_length", 0)
                         or gguf.arch_value("context_length", 0))
        if n_ctx_orig <= 0:
            raise ModelFileError(gguf.path, "yarn rope scaling needs rope.scaling.original_context_length")
        low = max(0.0, math.floor(_corr_dim(n_rot, n_ctx_orig, beta_fast, base)))
        high = min(n_rot - 1.0, math.ceil(_corr_dim(n_rot, n_ctx_orig, beta_slow, base)))
        ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
        freqs = freqs * (freq_scale * (1.0 - ramp) + ramp)
        inv = 1.0 / freq_scale
        mscale *= _mscale(inv, 1.0) / _mscale(inv, log_mul) if log_mul else _mscale(inv, 1.0)
    else:
        freqs = freqs * freq_scale
    return RopeScaling(n_rot=n_rot, mode=mode, base=base, freq_scale=freq_scale,
                       freqs=tuple(float(f) for f in freqs), mscale=float(mscale))
