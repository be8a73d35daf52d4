"""Host memory for the weights decode streams: one run of huge pages, where the OS lends them.

Why: a decode token reads every weight once, most of them a few hundred KiB at a time, and on
4 KiB pages each of those reads walks the page tables once per page (inside a VM, twice over).
NumPy asks Linux for transparent huge pages only for arrays of 4 MiB and up, which leaves out
nearly every layer's matrix. Here the interleaved copies of a model's weights are laid end to
end, in the order they are packed (the graph's order), in private anonymous memory marked
`MADV_HUGEPAGE`: on a host whose THP mode is `madvise` (Intel Xeon, 2026-12-05) the layer
matmuls of gemma3:270m took 10% less time (docs/performance.md). Where the mode is `never` or the
platform has no `madvise`, the memory is ordinary pages, as before: nothing changes but where
the bytes sit.
"""
from __future__ import annotations

import numpy as np

from llamay_core.host_memory import HUGE_PAGE, huge_page_chunk, huge_pages_available

# address space a chunk maps (a larger weight gets a chunk of its own size): untouched pages
# cost no memory, and a chunk's unused tail stays small beside a model's weights
CHUNK_BYTES = 64 << 20
ALIGN = 64  # a cache line: each array starts on one, as NumPy's would

__all__ = ["ALIGN", "CHUNK_BYTES", "HUGE_PAGE", "WeightArena", "huge_pages_available", "pages_note"]


THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def pages_note() -> str:
    """Which pages the arena's weights get here, for the bench header: results depend on it."""
    if not huge_pages_available():
        return "ordinary pages (no MADV_HUGEPAGE on this platform)"
    try:
        with open(THP_SETTING) as f:
            mode = f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return "ordinary pages (no transparent huge pages here)"
    return f"huge pages (THP {mode})" if mode in ("always", "madvise") else f"4 KiB pages (THP {mode})"


class WeightArena:
    """Hands out arrays from chunks of huge-page memory, one after another; `empty` has
    np.empty's signature. Each array keeps its chunk alive (NumPy holds the buffer), so the
    arena itself may go once the weights are packed."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self._chunk: np.ndarray | None = None
        self._at = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type = np.uint8) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if not huge_pages_available() or nbytes == 0:
            return np.empty(shape, dt)
        at = -(-self._at // ALIGN) * ALIGN
        if self._chunk is None or at + nbytes > self._chunk.size:
            self._chunk = huge_page_chunk(max(self.chunk_bytes, nbytes))
            at = 0
        self._at = at + nbytes
        return self._chunk[at:at + nbytes].view(dt).reshape(shape)
