"""Prompt lookup: draft the tokens that followed the last occurrence of the current n-gram."""
from __future__ import annotations

from typing import Sequence


class NgramDrafter:
    """Drafts from n-grams already in the context (prompt and generated text), no model needed.

    The longest suffix n-gram (ngram_max down to ngram_min tokens) that occurred before wins, and
    its most recent occurrence is used: in an edited or quoted document that is the copy being
    followed. The index grows with the context, so each proposal costs O(ngram_max).
    """

    name = "ngram"

    def __init__(self, ngram_max: int = 4, ngram_min: int = 1) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._tokens: list[int] = []
        # n -> {n-gram: index of its last token}, for n-grams followed by at least one token
        self._last_end: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(ngram_min, ngram_max + 1)}

    def propose(self, tokens: Sequence[int], max_drafts: int) -> list[int]:
        """Up to `max_drafts` tokens that may follow `tokens`; [] when no n-gram matches."""
        if max_drafts < 1:
            return []
        self._sync(tokens)
        toks = self._tokens
        for n in range(min(self.ngram_max, len(toks) - 1), self.ngram_min - 1, -1):
            end = self._last_end[n].get(tuple(toks[-n:]))
            if end is not None:
                # Copy what followed; past the end of the context keep copying from the draft
                # itself, so a repeat that is shorter than the lookahead still fills it.
                drafts = toks[end + 1:end + 1 + max_drafts]
                source = end + 1 + len(drafts)
                while len(drafts) < max_drafts:
                    drafts.append(drafts[source - len(toks)])
                    source += 1
                return drafts
        return []

    def _sync(self, tokens: Sequence[int]) -> None:
        known = len(self._tokens)
        # The caller's tokens only grow; anything else means a new context, so start over.
        if known > len(tokens) or (known and int(tokens[known - 1]) != self._tokens[-1]):
            self._tokens = []
            self._last_end = {n: {} for n in self._last_end}
            known = 0
        first_new_end = max(known - 1, 0)  # the old last token had no follower, so it is not indexed yet
        self._tokens.extend(int(t) for t in tokens[known:])
        toks = self._tokens
        for end in range(first_new_end, len(toks) - 1):
            for n, table in self._last_end.items():
                if end + 1 >= n:
                    table[tuple(toks[end + 1 - n:end + 1])] = end

    def close(self) -> None:
        self._tokens = []
