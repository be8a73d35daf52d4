"""KV pages in host memory: per layer, K and V arrays [pages, page_size, kv_heads * head_dim]."""
from __future__ import annotations

import numpy as np

from llamay_core.backend_api import KvSpec
from llamay_core.state.host_pages import standard_encoding

DTYPES = {"f32": np.float32, "f16": np.float16}


class ExamplePageStore:
    """Implements the PageStore protocol: read/write/copy whole pages, plus the ops' write/gather."""

    def __init__(self, spec: KvSpec) -> None:
        if spec.dtype not in DTYPES:
            raise ValueError(f"example backend stores KV as {', '.join(DTYPES)}, not {spec.dtype}")
        self.spec = spec
        self.encoding = standard_encoding(spec)
        dtype = DTYPES[spec.dtype]
        self.k = [np.zeros((spec.max_pages, spec.page_size, spec.n_kv_heads * spec.key_dim), dtype)
                  for _ in range(spec.n_layers)]
        self.v = [np.zeros((spec.max_pages, spec.page_size, spec.n_kv_heads * spec.value_dim), dtype)
                  for _ in range(spec.n_layers)]

    def _arrays(self) -> list[np.ndarray]:
        return [a for pair in zip(self.k, self.v) for a in pair]

    # -- used by the kv_write and attention ops ---------------------------------------------------
    def write(self, layer: int, pages: np.ndarray, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        self.k[layer][pages, slots] = k
        self.v[layer][pages, slots] = v

    def gather(self, layer: int, page_table: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V [length, width] float32 of one sequence: only the pages it owns, only `length` rows."""
        n_pages = -(-length // self.spec.page_size)
        pages = page_table[:n_pages]
        k = self.k[layer][pages].reshape(-1, self.k[layer].shape[-1])[:length]
        v = self.v[layer][pages].reshape(-1, self.v[layer].shape[-1])[:length]
        return k.astype(np.float32), v.astype(np.float32)

    # -- the PageStore protocol (fork, snapshot, restore, prefix cache) ------------------------------
    def read_page(self, page: int) -> bytes:
        return b"".join(a[page].tobytes() for a in self._arrays())

    def write_page(self, page: int, data: bytes) -> None:
        offset = 0
        for a in self._arrays():
            n = a[page].nbytes
            if offset + n > len(data):
                raise ValueError(f"page data is {len(data)} bytes, too short for this store")
            a[page] = np.frombuffer(data, a.dtype, count=a[page].size, offset=offset).reshape(a[page].shape)
            offset += n
        if offset != len(data):
            raise ValueError(f"page data is {len(data)} bytes, expected {offset}")

    def copy_page(self, src: int, dst: int) -> None:
        for a in self._arrays():
            a[dst] = a[src]
