"""Scaled rope: the RopeTable reference against ggml's recipe, and files that use it or are refused."""
from __future__ import annotations

import math

import numpy as np
import pytest

import llamay
from llamay_backends.reference import ops
from llamay_core.errors import ModelFileError
from llamay_core.files.gguf_file import open_gguf
from llamay_families.rope_scaling import read_rope
from tests.support.family_gguf import write_family_gguf

IDS = [int(i) for i in np.random.default_rng(3).integers(0, 263, 48)]


def ggml_yarn_rope(x, positions, n_heads, head_dim, n_rot, base, freq_scale, factors, ext_factor, attn_factor,
                   beta_fast, beta_slow, n_ctx_orig):
    """An independent, scalar transcription of ggml's rope_yarn for the "normal" pairing."""
    def corr_dim(rot):
        return n_rot * math.log(n_ctx_orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(n_rot - 1.0, math.ceil(corr_dim(beta_slow)))
    out = x.astype(np.float64).copy()
    for t, pos in enumerate(positions):
        for h in range(n_heads):
            for i0 in range(0, n_rot, 2):
                extrap = pos * base ** (-i0 / n_rot) / factors[i0 // 2]
                theta, mscale = freq_scale * extrap, attn_factor
                if ext_factor:
                    y = (i0 // 2 - low) / max(0.001, high - low)
                    mix = (1 - min(1.0, max(0.0, y))) * ext_factor
                    theta = theta * (1 - mix) + extrap * mix
                    mscale *= 1 + 0.1 * math.log(1 / freq_scale)
                c, s = math.cos(theta) * mscale, math.sin(theta) * mscale
                a, b = x[t, h * head_dim + i0], x[t, h * head_dim + i0 + 1]
                out[t, h * head_dim + i0] = a * c - b * s
                out[t, h * head_dim + i0 + 1] = a * s + b * c
    return out


@pytest.mark.parametrize("meta, factors", [
    ({}, True),
    ({"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}, False),
    ({"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 64}, False),
    ({"rope.scaling.type": "yarn", "rope.scaling.factor": 8.0, "rope.scaling.original_context_length": 128,
      "rope.scaling.attn_factor": 0.9}, True),
])
def test_rope_table_matches_ggml_recipe(tmp_path, meta, factors):
    path = write_family_gguf(tmp_path / "m.gguf", "llama", d=64, n_heads=2, n_kv=2, rope_freqs=factors, meta=meta)
    gguf = open_gguf(path, use_index=False)
    rope = read_rope(gguf, "normal", 32, 10000.0, factors="rope_freqs.weight")
    x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    positions = np.array([0, 1, 17, 200, 999])
    if rope.freqs is None:  # linear scaling alone stays a plain rope, which every backend has
        got = ops.rope(x, positions, 2, 32, 32, "normal", 10000.0, rope.freq_scale)
    else:
        got = ops.rope_table(x, positions, 2, 32, 32, "normal", np.array(rope.freqs), rope.mscale)
    ff = gguf.tensors["rope_freqs.weight"].data if factors else np.ones(16)
    factor = float(meta.get("rope.scaling.factor", 1.0))
    yarn = meta.get("rope.scaling.type") == "yarn"
    # llama.cpp hands ggml attn_factor = yarn mscale / (1 + 0.1 ln factor) * rope.scaling.attn_factor
    attn = meta.get("rope.scaling.attn_factor", 1.0) * ((1 + 0.1 * math.log(factor)) / (1 + 0.1 * math.log(factor))
                                                        if yarn else 1.0)
    want = ggml_yarn_rope(x, positions, 2, 32, 32, 10000.0, 1 / factor, ff, 1.0 if yarn else 0.0, attn, 32.0, 1.0,
                          meta.get("rope.scaling.original_context_length", 1024))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_plain_rope_is_a_table_of_its_frequencies():
    x = np.random.default_rng(1).standard_normal((4, 48)).astype(np.float32)
    pos = np.array([0, 3, 9, 400])
    inv = 0.5 * 10000.0 ** (-np.arange(0, 16, 2) / 16)
    for mode in ("normal", "neox"):
        np.testing.assert_array_equal(ops.rope(x, pos, 3, 16, 16, mode, 10000.0, 0.5),
                                      ops.rope_table(x, pos, 3, 16, 16, mode, inv))


def test_llama3_rope_freqs_change_the_output(tmp_path):
    """The Llama 3.x bug this family fixes: rope_freqs was loaded and silently ignored."""
    with_factors = write_family_gguf(tmp_path / "a.gguf", "llama", rope_freqs=True)
    without = write_family_gguf(tmp_path / "b.gguf", "llama")
    a = llamay.load(with_factors, backend="reference", n_ctx=64).logits(IDS)
    b = llamay.load(without, backend="reference", n_ctx=64).logits(IDS)
    np.testing.assert_array_equal(a[0], b[0])  # position 0: no rotation, same weights
    assert np.abs(a[1:] - b[1:]).max() > 1e-2


@pytest.mark.parametrize("arch, meta, message", [
    ("llama", {"rope.scaling.type": "longrope"}, "unsupported rope scaling type 'longrope'"),
    ("llama", {"rope.scaling.type": "llama3"}, "unsupported rope scaling type 'llama3'"),
    ("qwen3", {"rope.scaling.yarn_beta_fast": 16.0}, "unsupported qwen3.rope.scaling.yarn_beta_fast"),
    ("mistral3", {"attention.temperature_scale": 0.1}, "temperature_scale"),
    ("olmo2", {"attention.sliding_window": 16}, "sliding_window"),
])
def test_metadata_it_cannot_honour_is_refused(tmp_path, arch, meta, message):
    path = write_family_gguf(tmp_path / "m.gguf", arch, meta=meta)
    with pytest.raises(ModelFileError, match=message):
        llamay.load(path, backend="reference", n_ctx=64)


def test_mistral3_reads_its_yarn_betas(tmp_path):
    meta = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 4096}
    a = write_family_gguf(tmp_path / "a.gguf", "mistral3", meta=meta)
    b = write_family_gguf(tmp_path / "b.gguf", "mistral3", meta={**meta, "rope.scaling.yarn_beta_fast": 4.0})
    fa = read_rope(open_gguf(a, use_index=False), "normal", 16, 10000.0, yarn_keys=True).freqs
    fb = read_rope(open_gguf(b, use_index=False), "normal", 16, 10000.0, yarn_keys=True).freqs
    assert fa != fb


def test_a_tensor_no_op_reads_is_refused(tmp_path):
    path = write_family_gguf(tmp_path / "m.gguf", "llama",
                             extra_tensors={"blk.1.ffn_up_shexp.weight": np.zeros((32, 64), np.float32),
                                            "blk.0.ffn_gate_shexp.weight": np.zeros((32, 64), np.float32)})
    with pytest.raises(ModelFileError, match=r"tensor blk\.0\.ffn_gate_shexp\.weight and 1 more not used"):
        llamay.load(path, backend="reference", n_ctx=64)


def test_refusal_is_one_line_exit_2_on_the_cli(tmp_path):
    import subprocess
    import sys

    path = write_family_gguf(tmp_path / "m.gguf", "phi3", extra_tensors={"blk.0.attn_q.weight": np.zeros((64, 64), np.float32)})
    r = subprocess.run([sys.executable, "-m", "llamay_core.cli.main", "run", "-m", str(path), "-p", "hi",
                        "-backend", "reference"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "not used by the phi3 family" in r.stderr and "Traceback" not in r.stderr
