"""SentencePiece-style vocabularies (`tokenizer.ggml.model == "llama"`), as llama.cpp tokenizes them.

There are no merge rules: the text (spaces escaped as U+2581 '▁') starts as one symbol per
character, and the adjacent pair whose concatenation is a token with the highest score is merged
first (leftmost on ties), until no adjacent pair forms a token. A leftover symbol that is not a
token is spelled out as byte tokens `<0xNN>` (byte fallback).
"""
from __future__ import annotations

import heapq
from typing import Mapping, Sequence

SPACE_ESCAPE = "\u2581"  # '▁', how SentencePiece writes a space inside tokens


class SpmEncoder:
    """Encodes one piece of plain text (no special tokens) with a SentencePiece-style vocabulary."""

    def __init__(self, token_to_id: Mapping[str, int], scores: Sequence[float], unk_id: int | None) -> None:
        self._t2i = token_to_id
        self._scores = scores
        self._byte_ids = [_byte_token(token_to_id, b, unk_id) for b in range(256)]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; the caller has already added any space prefix."""
        text = text.replace(" ", SPACE_ESCAPE)
        n = len(text)
        if n == 0:
            return []
        t2i = self._t2i
        scores = self._scores
        # Symbols are spans of `text`: symbol i starts at start[i] and is length[i] characters
        # long (0 once merged into its left neighbour); prev/next link the live ones.
        start = list(range(n))
        length = [1] * n
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap: list[tuple[float, int, int, int]] = []
        push = heapq.heappush

        def try_pair(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            size = length[left] + length[right]
            tid = t2i.get(text[start[left]:start[left] + size])
            if tid is not None:
                # heapq is a min-heap: negate the score so the best pair pops first; equal
                # scores pop leftmost first, as in llama.cpp.
                push(heap, (-scores[tid], left, right, size))

        for i in range(1, n):
            try_pair(i - 1, i)
        pop = heapq.heappop
        while heap:
            _, left, right, size = pop(heap)
            # Stale entries: a side was merged away, or grew (so the sizes no longer add up).
            if not length[left] or not length[right] or length[left] + length[right] != size:
                continue
            length[left] = size
            length[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            try_pair(prev[left], left)
            try_pair(left, nxt[left])

        out: list[int] = []
        i = 0
        while i != -1:
            piece = text[start[i]:start[i] + length[i]]
            tid = t2i.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                # Only single characters can fail here (a merge always forms a token).
                byte_ids = self._byte_ids
                out.extend(bid for bid in (byte_ids[b] for b in piece.encode("utf-8")) if bid is not None)
            i = nxt[i]
        return out


def _byte_token(token_to_id: Mapping[str, int], b: int, unk_id: int | None) -> int | None:
    """The token for one raw byte: `<0xNN>`, else (ASCII) the character itself, else unknown."""
    tid = token_to_id.get(f"<0x{b:02X}>")
    if tid is None and b < 0x80:
        tid = token_to_id.get(chr(b))
    return tid if tid is not None else unk_id
