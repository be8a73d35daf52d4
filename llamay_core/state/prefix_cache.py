"""The prefix cache: full KV pages indexed by a hash of every token up to their end.

A page holding tokens [k*P, (k+1)*P) is only valid after exactly the tokens before it, so its
key hashes the whole prefix (a chain: each page's key hashes the previous key and its tokens).
The cache holds one reference to each page it indexes; a sequence that attaches a cached page
shares it like a fork, and the copy-on-write rule keeps the cached bytes intact.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence

import numpy as np

from llamay_core.engine.kv_pages import PagePool, SequenceKV


def chain_keys(tokens: Sequence[int], page_size: int, n_pages: int, start: bytes = b"") -> list[bytes]:
    """Keys of the first `n_pages` full pages of `tokens`."""
    keys, prev = [], start
    arr = np.asarray(tokens[: n_pages * page_size], dtype=np.int64)
    for i in range(n_pages):
        prev = hashlib.blake2b(prev + arr[i * page_size:(i + 1) * page_size].tobytes(), digest_size=16).digest()
        keys.append(prev)
    return keys


class PrefixCache:
    """LRU index of full pages under a memory budget."""

    def __init__(self, pool: PagePool, budget_bytes: int) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.max_pages = max(0, budget_bytes // max(pool.store.spec.page_bytes(), 1))
        self.entries: OrderedDict[bytes, int] = OrderedDict()
        self.hits_tokens = 0
        pool.reclaim = self.evict

    @property
    def pages(self) -> int:
        return len(self.entries)

    def attach(self, seq: SequenceKV, tokens: Sequence[int]) -> int:
        """Give an empty `seq` the cached pages that start `tokens`; returns the tokens reused.

        At least one token is always left to compute, since its logits are needed.
        """
        if seq.length or not self.entries:
            return 0
        usable = (len(tokens) - 1) // self.page_size
        pages, keys = [], []
        for key in chain_keys(tokens, self.page_size, usable):
            page = self.entries.get(key)
            if page is None:
                break
            self.entries.move_to_end(key)
            pages.append(page)
            keys.append(key)
        for page in pages:
            self.pool.incref(page)
        seq.pages = pages
        seq.prefix_keys = keys
        seq.length = len(pages) * self.page_size
        self.hits_tokens += seq.length
        return seq.length

    def insert(self, seq: SequenceKV, tokens: Sequence[int]) -> None:
        """Index the full pages of `seq` (whose contents are `tokens`) that are not cached yet."""
        if not self.max_pages:
            return
        n_full = min(seq.length, len(tokens)) // self.page_size
        done = len(seq.prefix_keys)
        if n_full <= done:
            return
        start = seq.prefix_keys[-1] if done else b""
        seq.prefix_keys.extend(chain_keys(tokens[done * self.page_size:], self.page_size, n_full - done, start))
        for i in range(done, n_full):
            key = seq.prefix_keys[i]
            if key in self.entries:
                self.entries.move_to_end(key)
                continue
            page = seq.pages[i]
            self.pool.incref(page)
            self.entries[key] = page
        while len(self.entries) > self.max_pages:
            if not self._evict_one():
                break

    def _evict_one(self) -> bool:
        for key, page in self.entries.items():
            if self.pool.refcount[page] == 1:  # only the cache holds it
                del self.entries[key]
                self.pool.decref(page)
                return True
        return False

    def evict(self, n_pages: int) -> int:
        """Free up to `n_pages` pages that no sequence uses (the pool calls this when it runs dry)."""
        freed = 0
        while freed < n_pages and self._evict_one():
            freed += 1
        return freed

    def clear(self) -> None:
        for page in self.entries.values():
            self.pool.decref(page)
        self.entries.clear()
