"""The batch's index arrays, packed into one int32 block so a pass costs one host-to-device copy.

Layout: tokens, positions, seq_index, logit_rows (max_tokens each), kv_lens (max_seqs), then the
page tables as [max_seqs, stride] (stride = the store's max_pages). Kernels get pointers into the
device block at fixed offsets, so captured CUDA graphs stay valid until the block is regrown.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from llamay_core.backend_api import Batch
from llamay_core.errors import BackendError


class StagingArea:
    def __init__(self, xp: Any, max_tokens: int, max_seqs: int, stride: int) -> None:
        self.max_tokens, self.max_seqs, self.stride = max_tokens, max_seqs, stride
        t = max_tokens
        self.offsets = {"tokens": 0, "positions": t, "seq_index": 2 * t, "logit_rows": 3 * t,
                        "kv_lens": 4 * t, "page_tables": 4 * t + max_seqs}
        self.size = 4 * t + max_seqs + max_seqs * stride
        self.host = np.zeros(self.size, np.int32)
        self.device = xp.zeros(self.size, np.int32)
        self.views = {name: self.device[off:] for name, off in self.offsets.items()}

    def fits(self, batch: Batch) -> bool:
        return len(batch.page_tables) <= self.max_seqs

    def pack(self, batch: Batch) -> int:
        """Write the batch into the host block; returns how many leading int32s must be uploaded."""
        t, r, s = batch.n_tokens, len(batch.logit_rows), len(batch.page_tables)
        if t > self.max_tokens or r > self.max_tokens:
            raise BackendError(f"cuda: a pass of {t} tokens exceeds the compiled {self.max_tokens}")
        o, h = self.offsets, self.host
        h[o["tokens"]:o["tokens"] + t] = batch.tokens
        h[o["positions"]:o["positions"] + t] = batch.positions
        h[o["seq_index"]:o["seq_index"] + t] = batch.seq_index
        h[o["logit_rows"]:o["logit_rows"] + r] = batch.logit_rows
        h[o["kv_lens"]:o["kv_lens"] + s] = batch.kv_lens
        base = o["page_tables"]
        for i, table in enumerate(batch.page_tables):
            n = len(table)
            if n > self.stride:
                raise BackendError(f"cuda: a page table of {n} pages exceeds the store's {self.stride}")
            row = base + i * self.stride
            h[row:row + n] = table
        return base + s * self.stride
