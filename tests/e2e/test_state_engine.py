"""The state engine on the real small model: forks, snapshots and the prefix cache change nothing."""
from __future__ import annotations

import pytest

import llamay

pytestmark = pytest.mark.model

SHARED = ("The library opened in 1902 with four thousand books. It grew slowly until a fire in 1931 "
          "destroyed the east wing, after which the town rebuilt it in brick.")
QUESTIONS = [" Question: When did the library open? Answer:", " Question: What happened in 1931? Answer:"]


def fresh(m, text, n=8):
    return m.generate(text, max_tokens=n)


def test_forks_restore_and_prefix_cache_equal_fresh_prefill(smollm_path, tmp_path):
    m = llamay.load(smollm_path, backend="reference", n_ctx=512, prefix_cache_mib=64)
    base = m.context().prefill(SHARED)
    before = m.pool.pages_allocated_total
    children = [base.fork() for _ in QUESTIONS]
    assert m.pool.pages_allocated_total == before  # fork allocates nothing
    for child, q in zip(children, QUESTIONS):
        allocated = m.pool.pages_allocated_total
        out = child.generate(q, max_tokens=8)
        assert child.seq.copies_on_write <= 1
        assert out == fresh(m, SHARED + q)
        assert m.pool.pages_allocated_total - allocated <= 1 + -(-(len(child.tokens) - len(base.tokens)) // 16)
    snap = tmp_path / "shared.kv"
    base.snapshot(snap)
    restored = m.restore(snap)
    assert restored.tokens == base.tokens
    assert restored.generate(QUESTIONS[0], max_tokens=8) == fresh(m, SHARED + QUESTIONS[0])
    # the prefix cache now holds SHARED's full pages: a new request reuses them
    out = m.generate(SHARED + QUESTIONS[1], max_tokens=8)
    assert m.last_stats.cached_tokens >= 16 * ((len(base.tokens) - 1) // 16) - 16
    plain = llamay.load(smollm_path, backend="reference", n_ctx=512)
    assert out == fresh(plain, SHARED + QUESTIONS[1])
