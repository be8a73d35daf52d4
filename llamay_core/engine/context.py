"""A Context: tokens with their computed KV pages, which can be extended, forked and saved."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from llamay_core.engine.kv_pages import SequenceKV

if TYPE_CHECKING:
    from llamay_core.engine.model import Model


class Context:
    """Computed context of one sequence. Cheap to fork; the model owns the pages' storage."""

    def __init__(self, model: "Model", seq: SequenceKV, tokens: Sequence[int] = ()) -> None:
        self.model = model
        self.seq = seq
        self.tokens: list[int] = list(tokens)
        self._last_logits: np.ndarray | None = None
        self.last_cached_tokens = 0

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def extend(self, ids: Sequence[int]) -> np.ndarray:
        """Run `ids` after the current tokens; return the logits after the last one."""
        self.last_cached_tokens = 0
        ids = list(ids)
        if not ids:
            return self.last_logits()
        if not self.tokens and self.model.prefix_cache is not None:
            reused = self.model.prefix_cache.attach(self.seq, ids)
            self.last_cached_tokens = reused
            self.tokens.extend(ids[:reused])
            ids = ids[reused:]
            if not ids:  # the whole prompt was cached: recompute only the last token's logits
                return self.last_logits()
        logits = self.model.forward.run(self.seq, ids)
        self.tokens.extend(ids)
        self._last_logits = logits
        if self.model.prefix_cache is not None:
            self.model.prefix_cache.insert(self.seq, self.tokens)
        return logits

    def extend_all(self, ids: Sequence[int]) -> np.ndarray:
        """Run `ids` in one pass after the current tokens; logits at every one of them [n, V].

        Speculative decoding verifies its drafts this way, then `truncate`s the rejected ones.
        """
        ids = list(ids)
        rows = self.model.forward.run(self.seq, ids, all_logits=True)
        self.last_cached_tokens = 0
        self.tokens.extend(ids)
        self._last_logits = rows[-1]
        return rows

    def last_logits(self) -> np.ndarray:
        """Logits after the last token (recomputed from the cache by re-running that one token)."""
        if self._last_logits is None:
            if not self.tokens:
                raise ValueError("an empty context has no logits: prefill something first")
            last = self.tokens[-1]
            self.seq.truncate(len(self.tokens) - 1)
            self._last_logits = self.model.forward.run(self.seq, [last])
        return self._last_logits

    def prefill(self, ids_or_text: Sequence[int] | str) -> "Context":
        """Extend the context by token ids or text (text gets BOS only when the context is empty)."""
        ids = self.model._prompt_ids(ids_or_text, first=not self.tokens)
        self.extend(ids)
        return self

    def fork(self) -> "Context":
        """A context sharing every page with this one: allocates no page."""
        child = Context(self.model, self.seq.fork(), self.tokens)
        child._last_logits = self._last_logits
        return child

    def truncate(self, n_tokens: int) -> None:
        """Drop tokens from `n_tokens` on; the KV pages past it are released."""
        if n_tokens < len(self.tokens):
            self.seq.truncate(n_tokens)
            del self.tokens[n_tokens:]
            self._last_logits = None

    def generate(self, prompt: Sequence[int] | str = "", **kwargs: Any) -> str | Iterator[str]:
        """Continue this context; same arguments as Model.generate."""
        return self.model.generate(prompt, context=self, **kwargs)

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        """Write tokens and KV pages to `path`; returns the bytes written."""
        from llamay_core.state.snapshot import write_snapshot

        return write_snapshot(self, path)

    def close(self) -> None:
        """Release this context's pages (shared pages stay with their other owners)."""
        self.seq.release()
        self.tokens = []
        self._last_logits = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
