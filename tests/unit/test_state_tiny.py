"""The state engine on a tiny model: fork, snapshot/restore, prefix cache, damaged snapshots."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_core.errors import SnapshotError
from tests.support.tiny_gguf import write_tiny_llama

PROMPT = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201, 202, 17, 18, 19, 20, 21, 22]


@pytest.fixture()
def tiny(tiny_model_path):
    return llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4)


def greedy(ctx, n=6):
    return [int(t) for t in _gen(ctx, n)]


def _gen(ctx, n):
    logits = ctx.last_logits()
    for _ in range(n):
        t = int(np.argmax(logits))
        yield t
        logits = ctx.extend([t])


def test_fork_shares_pages_and_generates_like_fresh(tiny):
    ctx = tiny.context().prefill(PROMPT)
    before = tiny.pool.pages_allocated_total
    child = ctx.fork()
    assert tiny.pool.pages_allocated_total == before
    child.extend([3])
    assert tiny.pool.pages_allocated_total - before <= 1 + 0  # the partial last page only
    fresh = tiny.context().prefill(PROMPT + [3])
    assert greedy(child) == greedy(fresh)
    assert greedy(ctx.fork()) == greedy(tiny.context().prefill(PROMPT))


@pytest.mark.parametrize("kv", ["f32", "f16", "vq8"])
def test_snapshot_restore_equals_fresh(tiny_model_path, tmp_path, kv):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4, kv_dtype=kv)
    ctx = m.context().prefill(PROMPT)
    path = tmp_path / "ctx.kv"
    ctx.snapshot(path)
    restored = m.restore(path)
    assert restored.tokens == ctx.tokens
    np.testing.assert_allclose(restored.last_logits(), ctx.last_logits(), rtol=1e-4, atol=1e-4)
    assert greedy(restored) == greedy(m.context().prefill(PROMPT))


def test_damaged_and_mismatched_snapshots_are_refused(tiny, tiny_model_path, tmp_path):
    ctx = tiny.context().prefill(PROMPT)
    path = tmp_path / "ctx.kv"
    ctx.snapshot(path)
    data = path.read_bytes()
    in_use = tiny.pool.pages_in_use
    damaged = tmp_path / "damaged.kv"
    damaged.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    truncated = tmp_path / "truncated.kv"
    truncated.write_bytes(data[:-50])
    for bad, words in ((damaged, "checksum"), (truncated, "checksum"), (tmp_path / "none.kv", "cannot read")):
        with pytest.raises(SnapshotError, match=words):
            tiny.restore(bad)
    assert tiny.pool.pages_in_use == in_use  # nothing half-loaded
    other = llamay.load(write_tiny_llama(tmp_path / "other.gguf", seed=1), backend="reference", n_ctx=128, page_size=4)
    with pytest.raises(SnapshotError, match="model"):
        other.restore(path)
    f16 = llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4, kv_dtype="f16")
    with pytest.raises(SnapshotError, match="KV dtype"):
        f16.restore(path)


def test_prefix_cache_reuses_pages_and_matches_fresh(tiny_model_path):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4, prefix_cache_mib=1)
    plain = llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4)
    first = m.context()
    first.extend(PROMPT)
    first.close()
    second = m.context()
    logits = second.extend(PROMPT[:17] + [99, 98])
    assert second.last_cached_tokens == 16
    expected = plain.context().extend(PROMPT[:17] + [99, 98])
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    text_a = m.generate(PROMPT, max_tokens=5)
    assert m.last_stats.cached_tokens == 20
    assert text_a == plain.generate(PROMPT, max_tokens=5)


def test_prefix_cache_evicts_under_budget(tiny_model_path):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=128, page_size=4, prefix_cache_mib=0.0001)
    page = m.kv_spec.page_bytes()
    assert m.prefix_cache.max_pages == int(0.0001 * 2**20) // page
    for shift in range(5):
        ctx = m.context()
        ctx.extend([t + shift for t in PROMPT])
        ctx.close()
    assert m.prefix_cache.pages <= m.prefix_cache.max_pages
