"""Where cached K/V values live in the device page store: the host mirror of kernels/paging.cuh.

A page holds, per layer in order, K [page_size, kw] then V [page_size, vw], kw = n_kv_heads * key_dim.
That is exactly the byte order of the reference store's `read_page`, so a snapshot written on one
backend restores on the other.
"""
from __future__ import annotations

import attrs

from llamay_core.backend_api import KvSpec


@attrs.frozen
class PageLayout:
    page_size: int
    kw: int
    vw: int
    n_layers: int

    @classmethod
    def of(cls, spec: KvSpec) -> "PageLayout":
        return cls(spec.page_size, spec.n_kv_heads * spec.key_dim, spec.n_kv_heads * spec.value_dim, spec.n_layers)

    @property
    def layer_elems(self) -> int:
        return self.page_size * (self.kw + self.vw)

    @property
    def page_elems(self) -> int:
        return self.n_layers * self.layer_elems

    def index(self, page: int, layer: int, is_v: bool, slot: int, col: int) -> int:
        """The flat element index `kv_index` in paging.cuh computes for the same arguments."""
        i = page * self.page_elems + layer * self.layer_elems
        i += self.page_size * self.kw + slot * self.vw if is_v else slot * self.kw
        return i + col
