"""The cpu backend's weight arena: arrays end to end, each usable as np.empty's would be."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from llamay_backends.cpu import weight_arena
from llamay_backends.cpu.weight_arena import ALIGN, WeightArena

needs_huge = pytest.mark.skipif(not weight_arena.huge_pages_available(), reason="no MADV_HUGEPAGE here")


@needs_huge
def test_arrays_follow_each_other_aligned_and_apart():
    arena = WeightArena(chunk_bytes=1 << 20)
    shapes = [(3, 70), (8, 128), (1, 1), (5, 333)]
    arrays = [arena.empty(s, np.uint8) for s in shapes]
    for a, s in zip(arrays, shapes):
        assert a.shape == s and a.dtype == np.uint8 and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % ALIGN == 0
    for k, a in enumerate(arrays):
        a[:] = k + 1
    for k, a in enumerate(arrays):  # no array wrote over another
        assert np.all(a == k + 1)
    starts = [a.ctypes.data for a in arrays]
    assert starts == sorted(starts)  # the order they were asked for: the order decode reads them
    assert all(b - a < a_.nbytes + ALIGN for a, b, a_ in zip(starts, starts[1:], arrays))


@needs_huge
def test_a_weight_larger_than_a_chunk_gets_its_own_and_other_dtypes_work():
    arena = WeightArena(chunk_bytes=1 << 16)  # rounded up to one huge page
    small = arena.empty((100,), np.float32)
    big = arena.empty((3000, 1000), np.uint8)  # past the chunk
    after = arena.empty((7, 9), np.int32)
    small[:] = 1.5
    big[:] = 7
    after[:] = -3
    assert small.dtype == np.float32 and np.all(small == 1.5)
    assert np.all(big == 7) and np.all(after == -3)
    assert big.ctypes.data % weight_arena.HUGE_PAGE == 0  # a new chunk starts on a huge page


@needs_huge
def test_arrays_outlive_the_arena():
    arena = WeightArena(chunk_bytes=1 << 20)
    a = arena.empty((64, 64), np.uint8)
    a[:] = np.arange(64, dtype=np.uint8)
    del arena
    gc.collect()
    assert np.array_equal(a[5], np.arange(64, dtype=np.uint8))


def test_without_huge_pages_it_is_np_empty(monkeypatch):
    monkeypatch.setattr(weight_arena, "huge_pages_available", lambda: False)
    a = WeightArena().empty((4, 6), np.uint8)
    assert a.shape == (4, 6) and a.flags.owndata  # NumPy's own allocation


def test_empty_shapes_are_fine():
    assert WeightArena().empty((0, 5), np.uint8).shape == (0, 5)


def test_the_pages_are_named_for_the_bench_header(monkeypatch, tmp_path):
    setting = tmp_path / "enabled"
    for line, want in (("always [madvise] never", "huge pages (THP madvise)"),
                       ("[always] madvise never", "huge pages (THP always)"),
                       ("always madvise [never]", "4 KiB pages (THP never)")):
        setting.write_text(line + "\n")
        monkeypatch.setattr(weight_arena, "THP_SETTING", str(setting))
        monkeypatch.setattr(weight_arena, "huge_pages_available", lambda: True)
        assert weight_arena.pages_note() == want
    monkeypatch.setattr(weight_arena, "THP_SETTING", str(tmp_path / "absent"))
    assert "ordinary pages" in weight_arena.pages_note()
    monkeypatch.setattr(weight_arena, "huge_pages_available", lambda: False)
    assert "ordinary pages" in weight_arena.pages_note()
