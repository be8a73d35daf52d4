"""The engine's page pool: reference counts, fork sharing, copy-on-write, truncation."""
from __future__ import annotations

import numpy as np
import pytest

from llamay_core.backend_api import KvSpec
from llamay_core.engine.kv_pages import PagePool, SequenceKV
from llamay_core.errors import ContextOverflowError
from llamay_core.state.host_pages import HostPageStore


def make_pool(max_pages=8, page_size=4, dtype="f32"):
    spec = KvSpec(n_layers=2, n_kv_heads=1, key_dim=32, value_dim=32, page_size=page_size, max_pages=max_pages, dtype=dtype)
    return PagePool(HostPageStore(spec))


def test_fork_allocates_nothing_and_cow_copies_one_page():
    pool = make_pool()
    seq = SequenceKV(pool)
    seq.reserve(6)
    seq.advance(6)  # pages: one full, one half full
    before = pool.pages_allocated_total
    child = seq.fork()
    assert pool.pages_allocated_total == before
    assert child.pages == seq.pages
    child.reserve(1)  # writes into the shared partial page
    assert pool.pages_allocated_total == before + 1
    assert child.pages[0] == seq.pages[0] and child.pages[1] != seq.pages[1]
    assert child.copies_on_write == 1


def test_fork_at_page_boundary_copies_nothing():
    pool = make_pool()
    seq = SequenceKV(pool)
    seq.reserve(8)
    seq.advance(8)
    child = seq.fork()
    before = pool.pages_allocated_total
    child.reserve(1)
    assert pool.pages_allocated_total == before + 1  # a fresh page, no copy
    assert child.copies_on_write == 0


def test_release_returns_pages_and_exhaustion_is_a_clear_error():
    pool = make_pool(max_pages=2)
    seq = SequenceKV(pool)
    seq.reserve(8)
    with pytest.raises(ContextOverflowError):
        seq.reserve(9)
    seq.release()
    assert pool.pages_in_use == 0


def test_truncate_frees_whole_pages():
    pool = make_pool()
    seq = SequenceKV(pool)
    seq.reserve(12)
    seq.advance(12)
    seq.truncate(5)
    assert len(seq.pages) == 2 and seq.length == 5 and pool.pages_in_use == 2


@pytest.mark.parametrize("dtype", ["f32", "f16", "vq8"])
def test_page_bytes_round_trip(dtype):
    pool = make_pool(dtype=dtype)
    store = pool.store
    rng = np.random.default_rng(0)
    k = rng.standard_normal((3, 32)).astype(np.float32)
    store.write(0, np.array([1, 1, 1]), np.array([0, 1, 2]), k, k)
    data = store.read_page(1)
    store.write_page(5, data)
    a, _ = store.gather(0, np.array([5]), 3)
    b, _ = store.gather(0, np.array([1]), 3)
    np.testing.assert_array_equal(a, b)
    tol = {"f32": 0, "f16": 1e-3, "vq8": 0.03}[dtype]
    assert np.max(np.abs(a - k)) <= tol * np.max(np.abs(k)) + 1e-7
