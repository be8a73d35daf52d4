"""Driving the compiled graph: split tokens into passes, place them in the KV pages, get logits."""
from __future__ import annotations

from typing import Sequence

import attrs
import numpy as np

from llamay_core.backend_api import Batch, Executable
from llamay_core.engine.kv_pages import PagePool, SequenceKV
from llamay_core.engine.pass_size import DEFAULT_UBATCH
from llamay_core.errors import ContextOverflowError


@attrs.define
class SequenceChunk:
    """Part of one sequence's tokens in a multi-sequence pass."""

    seq: SequenceKV
    tokens: Sequence[int]
    all_logits: bool = False  # False: only the last token's logits


class Forward:
    """Runs tokens through the executable; never allocates pages it does not need."""

    def __init__(self, executable: Executable, pool: PagePool, n_ctx: int, ubatch: int = DEFAULT_UBATCH) -> None:
        self.executable = executable
        self.pool = pool
        self.n_ctx = n_ctx
        self.ubatch = ubatch
        self.passes = 0

    def run(self, seq: SequenceKV, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Extend `seq` by `tokens`; return logits of the last token [V], or of every token [n, V]."""
        if not len(tokens):
            raise ValueError("no tokens to run")
        if seq.length + len(tokens) > self.n_ctx:
            raise ContextOverflowError(
                f"{seq.length + len(tokens)} tokens exceed the context of {self.n_ctx}")
        if len(tokens) == 1 and not all_logits:
            return self._run_one(seq, tokens[0])
        outputs = []
        for start in range(0, len(tokens), self.ubatch):
            chunk = tokens[start:start + self.ubatch]
            last_chunk = start + self.ubatch >= len(tokens)
            if all_logits or last_chunk:
                out = self.run_many([SequenceChunk(seq, chunk, all_logits)])[0]
                outputs.append(out)
            else:
                self.run_many([SequenceChunk(seq, chunk, all_logits=False)], want_logits=False)
        if all_logits:
            return np.concatenate(outputs, axis=0)
        return outputs[-1][-1]

    def _run_one(self, seq: SequenceKV, token: int) -> np.ndarray:
        # a decode step: `run_many`'s batch for one token of one sequence, built without its
        # per-chunk lists. Each token runs this with cold caches (its weights have just streamed
        # through them), where every Python step costs several times its warm time
        seq.reserve(1)
        position = seq.length
        batch = Batch(
            tokens=np.array([token], np.int32),
            positions=np.array([position], np.int32),
            seq_index=np.zeros(1, np.int32),
            page_tables=[seq.page_table()],
            kv_lens=np.array([position + 1], np.int32),
            logit_rows=np.zeros(1, np.int32),
        )
        logits = self.executable(batch)
        self.passes += 1
        seq.advance(1)
        return logits[0]

    def run_many(self, chunks: Sequence[SequenceChunk], want_logits: bool = True) -> list[np.ndarray]:
        """One pass over several sequences at once (continuous batching, speculative verify).

        Returns, per chunk, logits [n, V] (all_logits) or [1, V] (last token).
        """
        tokens, positions, seq_index, rows, tables, lens = [], [], [], [], [], []
        for s, chunk in enumerate(chunks):
            n = len(chunk.tokens)
            chunk.seq.reserve(n)
            base = len(tokens)
            tokens.extend(chunk.tokens)
            positions.extend(range(chunk.seq.length, chunk.seq.length + n))
            seq_index.extend([s] * n)
            if want_logits:
                rows.extend(range(base, base + n) if chunk.all_logits else [base + n - 1])
            tables.append(chunk.seq.page_table())
            lens.append(chunk.seq.length + n)
        if not want_logits:
            rows = [len(tokens) - 1]
        batch = Batch(
            tokens=np.asarray(tokens, np.int32),
            positions=np.asarray(positions, np.int32),
            seq_index=np.asarray(seq_index, np.int32),
            page_tables=tables,
            kv_lens=np.asarray(lens, np.int32),
            logit_rows=np.asarray(rows, np.int32),
        )
        logits = self.executable(batch)
        self.passes += 1
        for chunk in chunks:
            chunk.seq.advance(len(chunk.tokens))
        if not want_logits:
            return []
        out, offset = [], 0
        for chunk in chunks:
            n = len(chunk.tokens) if chunk.all_logits else 1
            out.append(logits[offset:offset + n])
            offset += n
        return out
