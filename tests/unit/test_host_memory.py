"""Huge-page host memory (`llamay_core.host_memory`): zeroed, aligned, and ordinary where it must be."""
from __future__ import annotations

import numpy as np
import pytest

from llamay_core import host_memory
from llamay_core.host_memory import HUGE_PAGE, huge_page_zeros

needs_huge = pytest.mark.skipif(not host_memory.huge_pages_available(), reason="no MADV_HUGEPAGE here")


@needs_huge
def test_an_array_of_a_huge_page_or_more_starts_on_one_and_reads_as_zeros():
    a = huge_page_zeros((300, 16, 128), np.float32)  # 2.3 MiB
    assert a.ctypes.data % HUGE_PAGE == 0
    assert a.shape == (300, 16, 128) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    assert not a.any()
    a[299, 15, 127] = 1.5  # its last element is its own
    assert a.sum() == 1.5


def test_a_small_array_or_a_platform_without_madvise_gets_ordinary_zeros(monkeypatch):
    small = huge_page_zeros((3, 16, 8), np.float16)
    assert small.shape == (3, 16, 8) and small.dtype == np.float16 and not small.any()
    monkeypatch.setattr(host_memory, "huge_pages_available", lambda: False)
    big = huge_page_zeros((HUGE_PAGE // 4,), np.float32)
    assert big.nbytes == HUGE_PAGE and not big.any() and big.flags.writeable
    assert huge_page_zeros((0, 4), np.float32).shape == (0, 4)
