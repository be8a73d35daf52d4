"""Host memory on transparent huge pages, where the OS lends them: for what decode reads every token.

Why: on 4 KiB pages, every 4 KiB a token reads costs a page-table walk (inside a VM, twice over)
once the TLB has been swept by the rest of the token's reads. A decode reads all the weights and
every layer's KV rows, so it sweeps it each token. Linux gives huge pages only to 2 MiB-aligned
ranges of memory marked `MADV_HUGEPAGE` (where its THP mode is `madvise` or `always`). NumPy
marks only the aligned middle of arrays of 4 MiB and more, so smaller arrays, and the unaligned
head of larger ones, stay on 4 KiB pages. That head is where a KV store's first pages sit. Where
the platform has no `madvise`, these helpers give ordinary memory.
"""
from __future__ import annotations

import mmap

import numpy as np

HUGE_PAGE = 2 << 20


def huge_pages_available() -> bool:
    """Whether this platform can ask for transparent huge pages on private anonymous memory."""
    return all(hasattr(mmap, name) for name in ("MADV_HUGEPAGE", "MAP_PRIVATE", "MAP_ANONYMOUS"))


def huge_page_chunk(nbytes: int) -> np.ndarray:
    """Zeroed uint8[nbytes rounded up to 2 MiB] starting on a 2 MiB boundary, in private anonymous
    memory marked `MADV_HUGEPAGE`. Untouched, it costs address space only. Touched, it takes
    memory 2 MiB at a time where the OS lends huge pages, else 4 KiB at a time. The array keeps
    the mapping alive. Call only where `huge_pages_available()`."""
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    memory = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # a kernel without THP: ordinary pages
        pass
    whole = np.frombuffer(memory, np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE  # huge pages map 2 MiB-aligned addresses only
    return whole[start:start + size]


def huge_page_zeros(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """np.zeros(shape, dtype) in its own `huge_page_chunk`: writeable, C-contiguous, starting on a
    2 MiB boundary. An array smaller than a huge page, which would leave most of one unused, or a
    platform without `MADV_HUGEPAGE`, gets np.zeros."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < HUGE_PAGE or not huge_pages_available():
        return np.zeros(shape, dt)
    return huge_page_chunk(nbytes)[:nbytes].view(dt).reshape(shape)
