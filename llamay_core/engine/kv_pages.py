"""The engine's side of the paged KV cache: page ids, reference counts and page tables.

A backend stores page bytes (its PageStore); the engine decides which page holds what. A fork
copies a page table and increments reference counts; the first write into a shared page copies
that page only (copy-on-write), which in practice is just the partial last page.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from llamay_core.backend_api import PageStore
from llamay_core.errors import ContextOverflowError


class PagePool:
    """Allocates page ids of one PageStore and counts references to each."""

    def __init__(self, store: PageStore) -> None:
        self.store = store
        self.page_size = store.spec.page_size
        self.capacity = store.spec.max_pages
        self.refcount = np.zeros(self.capacity, np.int32)
        self._free = list(range(self.capacity - 1, -1, -1))
        # Called when the pool runs dry, before giving up: the prefix cache frees pages there.
        self.reclaim: Callable[[int], int] | None = None
        self.pages_allocated_total = 0

    @property
    def pages_in_use(self) -> int:
        return self.capacity - len(self._free)

    def alloc(self) -> int:
        if not self._free and self.reclaim is not None:
            self.reclaim(1)
        if not self._free:
            raise ContextOverflowError(
                f"KV cache is full ({self.capacity} pages of {self.page_size} tokens); use a larger -ctx")
        page = self._free.pop()
        self.refcount[page] = 1
        self.pages_allocated_total += 1
        return page

    def incref(self, page: int) -> None:
        self.refcount[page] += 1

    def decref(self, page: int) -> None:
        self.refcount[page] -= 1
        if self.refcount[page] == 0:
            self._free.append(page)
        elif self.refcount[page] < 0:
            raise RuntimeError(f"page {page} released twice")


class SequenceKV:
    """One sequence's page table and length in a PagePool."""

    def __init__(self, pool: PagePool, pages: list[int] | None = None, length: int = 0) -> None:
        self.pool = pool
        self.pages: list[int] = pages if pages is not None else []
        self.length = length
        self.copies_on_write = 0
        # Prefix-cache keys of this sequence's full pages, in order (kept so each full page is
        # hashed once, not again at every later page boundary).
        self.prefix_keys: list[bytes] = []

    def page_table(self) -> np.ndarray:
        return np.asarray(self.pages, dtype=np.int32)

    def reserve(self, n_new: int) -> None:
        """Make positions length..length+n_new-1 writable: new pages, or a private copy of a shared one."""
        page_size = self.pool.page_size
        if self.length % page_size and self.pages:
            last = len(self.pages) - 1
            if self.pool.refcount[self.pages[last]] > 1:
                self._copy_on_write(last)
        need = -(-(self.length + n_new) // page_size)
        while len(self.pages) < need:
            self.pages.append(self.pool.alloc())

    def _copy_on_write(self, index: int) -> None:
        old = self.pages[index]
        new = self.pool.alloc()
        self.pool.store.copy_page(old, new)
        self.pool.decref(old)
        self.pages[index] = new
        self.copies_on_write += 1

    def advance(self, n: int) -> None:
        self.length += n

    def fork(self) -> "SequenceKV":
        """A sequence sharing every page with this one; allocates nothing."""
        for page in self.pages:
            self.pool.incref(page)
        child = SequenceKV(self.pool, list(self.pages), self.length)
        child.prefix_keys = list(self.prefix_keys)
        return child

    def truncate(self, length: int) -> None:
        """Forget tokens from `length` on (rejected drafts, edited prompts); frees whole pages."""
        if length >= self.length:
            return
        keep = -(-length // self.pool.page_size)
        for page in self.pages[keep:]:
            self.pool.decref(page)
        del self.pages[keep:]
        del self.prefix_keys[length // self.pool.page_size:]
        self.length = length

    def release(self) -> None:
        for page in self.pages:
            self.pool.decref(page)
        self.pages = []
        self.prefix_keys = []
        self.length = 0
