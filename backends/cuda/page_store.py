"""KV pages in device memory: one flat [max_pages, page_elems] array (layout in paging.py).

Written against an array module `xp` (CuPy on a GPU). Page reads and writes are whole-row copies,
so the same code runs with NumPy in the unit tests, where its bytes are compared with the
reference store's.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from llamay_core.backend_api import KvSpec
from llamay_core.state.host_pages import standard_encoding
from llamay_backends.cuda.paging import PageLayout

PAGE_DTYPES = {"f32": np.float32, "f16": np.float16}


class CudaPageStore:
    def __init__(self, spec: KvSpec, xp: Any, to_host: Callable[[Any], np.ndarray]) -> None:
        if spec.dtype not in PAGE_DTYPES:
            raise ValueError(f"the cuda backend stores KV as f32 or f16, not {spec.dtype}")
        self.spec = spec
        self.encoding = standard_encoding(spec)
        self.layout = PageLayout.of(spec)
        self.dtype = np.dtype(PAGE_DTYPES[spec.dtype])
        self.xp = xp
        self._to_host = to_host
        self.pages = xp.zeros((spec.max_pages, self.layout.page_elems), self.dtype)

    @property
    def nbytes(self) -> int:
        return int(self.pages.nbytes)

    def read_page(self, page: int) -> bytes:
        return self._to_host(self.pages[page]).tobytes()

    def write_page(self, page: int, data: bytes) -> None:
        expected = self.layout.page_elems * self.dtype.itemsize
        if len(data) != expected:
            raise ValueError(f"page data is {len(data)} bytes, expected {expected}")
        self.pages[page] = self.xp.asarray(np.frombuffer(data, self.dtype))

    def copy_page(self, src: int, dst: int) -> None:
        self.pages[dst] = self.pages[src]
