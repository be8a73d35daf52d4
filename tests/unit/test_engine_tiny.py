"""The engine on a tiny random model: cache consistency, multi-sequence passes, contexts."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_core.engine.forward import SequenceChunk
from llamay_core.engine.kv_pages import SequenceKV
from llamay_core.errors import ContextOverflowError, UsageError

IDS = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201, 202, 17, 18, 19, 20]


@pytest.fixture(params=["f32", "f16", "vq8"])
def tiny(tiny_model_path, request):
    return llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4, kv_dtype=request.param)


def test_prefill_then_decode_equals_one_pass(tiny):
    full = tiny.logits(IDS)
    ctx = tiny.context()
    ctx.extend(IDS[:-1])
    last = ctx.extend(IDS[-1:])
    tol = 1e-4 if tiny.kv_spec.dtype == "f32" else 5e-2
    np.testing.assert_allclose(last, full[-1], atol=tol * np.abs(full[-1]).max())


def test_many_sequences_in_one_pass_equal_separate_passes(tiny):
    a, b = SequenceKV(tiny.pool), SequenceKV(tiny.pool)
    out = tiny.forward.run_many([SequenceChunk(a, IDS[:7], True), SequenceChunk(b, IDS[3:12], True)])
    sep_a = tiny.logits(IDS[:7])
    sep_b = tiny.logits(IDS[3:12])
    # the reference's matmuls promise no bits across batch shapes (some BLAS kernels' rows differ
    # with their place: OpenBLAS's Haswell sgemm); a last-bit difference in a key can round to the
    # next float16, or the next 8-bit step, so those stores get their quantization's tolerance
    tol = 1e-4 if tiny.kv_spec.dtype == "f32" else 5e-2
    np.testing.assert_allclose(out[0], sep_a, rtol=1e-4, atol=tol * np.abs(sep_a).max())
    np.testing.assert_allclose(out[1], sep_b, rtol=1e-4, atol=tol * np.abs(sep_b).max())
    a.release()
    b.release()


def test_ubatch_split_does_not_change_logits(tiny_model_path):
    m1 = llamay.load(tiny_model_path, backend="reference", n_ctx=64, ubatch=256)
    m2 = llamay.load(tiny_model_path, backend="reference", n_ctx=64, ubatch=3)
    np.testing.assert_allclose(m1.logits(IDS), m2.logits(IDS), rtol=1e-4, atol=1e-4)


def test_context_overflow_and_bad_ids_are_clear(tiny_model_path):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=8)
    with pytest.raises(ContextOverflowError):
        m.logits(IDS)
    with pytest.raises(UsageError):
        m.logits([99999])
    with pytest.raises(UsageError):
        m.generate("hi", max_tokens=0)


def test_pages_are_returned_after_generation(tiny):
    before = tiny.pool.pages_in_use
    tiny.generate("the cat", max_tokens=5)
    tiny.logits(IDS)
    assert tiny.pool.pages_in_use == before


def test_one_token_pass_hands_the_backend_run_manys_batch(tiny_model_path):
    # `Forward.run` builds a decode step's batch on a path of its own (`_run_one`): the backend
    # must get what `run_many` would give it, and the sequence must move on the same way
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=64, page_size=4)
    seen = []
    executable = m.forward.executable
    m.forward.executable = lambda batch: (seen.append(batch), executable(batch))[1]
    ctx = m.context()
    ctx.extend(IDS[:7])  # 7 tokens: the next one starts no page; then one that starts a page
    twin = ctx.fork()
    for token in (IDS[7], IDS[8]):
        seen.clear()
        passes = m.forward.passes
        one = m.forward.run(ctx.seq, [token])
        many = m.forward.run_many([SequenceChunk(twin.seq, [token])])[0][-1]
        assert m.forward.passes == passes + 2
        fast, general = seen
        for field in ("tokens", "positions", "seq_index", "kv_lens", "logit_rows"):
            a, b = getattr(fast, field), getattr(general, field)
            assert a.dtype == b.dtype and a.tolist() == b.tolist(), field
        (a,), (b,) = fast.page_tables, general.page_tables
        # the forks' tables differ where one copied a shared page on write: each its own
        assert a.dtype == b.dtype and a.tolist() == ctx.seq.pages and b.tolist() == twin.seq.pages
        assert ctx.seq.length == twin.seq.length
        np.testing.assert_array_equal(one, many)
    ctx.close()
    twin.close()
