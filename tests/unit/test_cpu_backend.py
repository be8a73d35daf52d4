"""The cpu backend against reference on tiny models: every weight type, KV dtypes, batching."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import llamay
from llamay_core.engine.forward import SequenceChunk
from llamay_core.engine.kv_pages import SequenceKV
from llamay_core.errors import BackendError
from tests.support.family_gguf import write_family_gguf
from tests.support.tiny_gguf import write_tiny_llama

IDS = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201, 202, 17, 18, 19, 20, 40, 41, 42]


def nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


@pytest.fixture()
def float_decode(monkeypatch):
    """The exact float-activation decode path (int8 is the default; these comparisons are exact)."""
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", "float")


@pytest.mark.parametrize("weight_type", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.F16, Q.F32])
def test_logits_match_reference(tmp_path, weight_type, float_decode):
    path = write_tiny_llama(tmp_path / "m.gguf", weight_type=weight_type, biases=True, tied=False)
    ref = llamay.load(path, backend="reference", n_ctx=64, page_size=4)
    cpu = llamay.load(path, backend="cpu", n_ctx=64, page_size=4)
    assert nmse(cpu.logits(IDS), ref.logits(IDS)) < 1e-8
    assert cpu.generate("the cat", max_tokens=8) == ref.generate("the cat", max_tokens=8)


@pytest.mark.parametrize("kv", ["f32", "f16", "vq8"])
def test_kv_dtypes_match_reference(tiny_model_path, kv, float_decode):
    ref = llamay.load(tiny_model_path, backend="reference", n_ctx=64, page_size=4, kv_dtype=kv)
    cpu = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4, kv_dtype=kv)
    a, b = ref.context(), cpu.context()
    a.extend(IDS[:10])
    b.extend(IDS[:10])
    assert nmse(b.extend(IDS[10:13]), a.extend(IDS[10:13])) < 1e-8


def test_f16_pages_under_prompts_and_mixed_batches_match_reference(tmp_path, float_decode):
    # heads of 64: a prompt of 40 rows goes as a segment of GEMMs over its pages gathered as f32,
    # a batch's short sequence reads its float16 pages in place beside a long one
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0", head_dim=64)
    results = []
    for backend in ("reference", "cpu"):
        model = llamay.load(path, backend=backend, n_ctx=128, kv_dtype="f16")
        long, short = model.context(), model.context()
        first = long.extend(IDS * 2)[None, :]
        short.extend(IDS[:5])
        chunks = [SequenceChunk(long.seq, IDS[:20], all_logits=True), SequenceChunk(short.seq, IDS[5:8], all_logits=True)]
        results.append([first, *model.forward.run_many(chunks)])
    for cpu, ref in zip(results[1], results[0]):
        assert nmse(cpu, ref) < 1e-8


@pytest.mark.parametrize("weight_type", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0])
def test_int8_decode_is_close_to_reference(tmp_path, weight_type, monkeypatch):
    # decode rows quantize their activations to int8 per 32 (llama.cpp's scheme): close, not exact
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", "int8")
    path = write_tiny_llama(tmp_path / "m.gguf", weight_type=weight_type, biases=True, tied=False)
    ref = llamay.load(path, backend="reference", n_ctx=64, page_size=4)
    cpu = llamay.load(path, backend="cpu", n_ctx=64, page_size=4)
    assert cpu.backend.activations == "int8"
    a, b = ref.context(), cpu.context()
    a.extend(IDS[:10])
    b.extend(IDS[:10])
    for t in IDS[10:14]:
        assert nmse(b.extend([t]), a.extend([t])) < 1e-3


def test_int8_decode_is_the_default_and_float_is_chosen_by_name(tiny_model_path, monkeypatch):
    from llamay_backends.cpu import kernels

    monkeypatch.delenv("LLAMAY_CPU_ACTIVATIONS", raising=False)
    cpu = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4)
    assert cpu.backend.activations == "int8"
    if kernels.HAS_AVX2 or kernels.HAS_VNNI:
        assert "decode int8 activations" in cpu.backend.describe()["matmul"]
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", "float")
    cpu = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4)
    assert cpu.backend.activations == "float"
    assert "decode float activations" in cpu.backend.describe()["matmul"]


def test_bad_activations_option_is_one_line_error(tiny_model_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", "int4")
    with pytest.raises(BackendError, match="unavailable: LLAMAY_CPU_ACTIVATIONS='int4': expected int8 or float"):
        llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4)


@pytest.mark.parametrize("activations", ["int8", "float"])
def test_batch_composition_never_changes_a_sequence(tiny_model_path, monkeypatch, activations):
    """A sequence's logits are bit-identical alone or beside others (decode and prefill rows)."""
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", activations)
    m = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4, n_seq=8)

    def alone(prefix, step):
        seq = SequenceKV(m.pool)
        m.forward.run_many([SequenceChunk(seq, prefix)])
        out = m.forward.run_many([SequenceChunk(seq, step)])[0]
        seq.release()
        return out

    seqs = [SequenceKV(m.pool) for _ in range(5)]
    prompts = [IDS[i:i + 3 + 5 * i] for i in range(5)]  # one long (> 16 rows) prompt among short ones
    m.forward.run_many([SequenceChunk(s, p) for s, p in zip(seqs, prompts)])
    together = m.forward.run_many([SequenceChunk(s, [7 + i]) for i, s in enumerate(seqs)])
    for i, p in enumerate(prompts):
        np.testing.assert_array_equal(together[i], alone(p, [7 + i]))
    for s in seqs:
        s.release()


def test_context_state_engine_on_cpu(tiny_model_path, tmp_path):
    m = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4)
    ctx = m.context()
    ctx.extend(IDS)
    ctx.snapshot(tmp_path / "s.kv")
    restored = m.restore(tmp_path / "s.kv")
    fork = ctx.fork()
    expected = m.generate(IDS, max_tokens=6)
    assert m.generate(context=restored, max_tokens=6) == expected
    assert m.generate(context=fork, max_tokens=6) == expected
