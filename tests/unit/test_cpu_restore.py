"""Restore's data path: many pages in one copy per array, byte-equal to the page-by-page path,
and a restored cpu context computes exactly what a fresh prefill does."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_core.backend_api import KvSpec
from llamay_core.state.host_pages import HostPageStore

IDS = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201, 202, 17, 18, 19, 20, 40, 41, 42]


@pytest.mark.parametrize("kv", ["f32", "f16", "vq8"])
@pytest.mark.parametrize("pages", [[0, 1, 2, 3], [7, 2, 5]])
def test_many_pages_move_like_single_pages(kv, pages):
    spec = KvSpec(n_layers=3, n_kv_heads=2, key_dim=32, value_dim=32, page_size=4, max_pages=8, dtype=kv)
    src, one, many = HostPageStore(spec), HostPageStore(spec), HostPageStore(spec)
    rng = np.random.default_rng(1)
    for layer in range(spec.n_layers):
        p = np.repeat(np.arange(spec.max_pages), spec.page_size)
        s = np.tile(np.arange(spec.page_size), spec.max_pages)
        width = spec.n_kv_heads * spec.key_dim
        src.write(layer, p, s, rng.standard_normal((len(p), width)).astype(np.float32),
                  rng.standard_normal((len(p), width)).astype(np.float32))
    data = src.read_pages(pages)
    assert data == b"".join(src.read_page(p) for p in pages)
    for i, page in enumerate(pages):
        one.write_page(page, src.read_page(page))
    many.write_pages(pages, np.frombuffer(data, np.uint8))
    for page in range(spec.max_pages):
        assert many.read_page(page) == one.read_page(page)
    with pytest.raises(ValueError, match="bytes"):
        many.write_pages(pages, np.frombuffer(data, np.uint8)[:-1])


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_restored_cpu_context_equals_fresh_prefill(tiny_model_path, tmp_path, kv):
    m = llamay.load(tiny_model_path, backend="cpu", n_ctx=64, page_size=4, kv_dtype=kv)
    ctx = m.context()
    ctx.extend(IDS)
    ctx.snapshot(tmp_path / "s.kv")
    restored = m.restore(tmp_path / "s.kv")
    fresh = m.context()
    fresh.extend(IDS)
    np.testing.assert_array_equal(restored.extend([3, 4]), fresh.extend([3, 4]))
