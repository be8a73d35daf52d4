"""A smaller model drafts greedily; its own Context follows the target's tokens and rolls back."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from llamay_core.engine.model import Model


def same_vocabulary(a: "Model", b: "Model") -> bool:
    """Whether token ids mean the same text in both models (then drafts need no translation)."""
    ta, tb = a.tokenizer, b.tokenizer
    return ta is tb or (ta.n_vocab == tb.n_vocab and ta.vocab.texts == tb.vocab.texts)


class DraftModelDrafter:
    """Greedy drafts from `draft` for `target`.

    The draft context is kept in step with the target's tokens: each proposal truncates it to the
    prefix it shares with them (dropping the drafts that were rejected) and extends it by the
    rest, so the draft model never recomputes what it already holds. When the vocabularies
    differ, text is the common language: the target's tokens are re-tokenized for the draft model
    and the drafts re-tokenized back; the target verifies every draft, so this can only cost
    acceptance, never change the output.
    """

    name = "draft"

    def __init__(self, draft: "Model", target: "Model") -> None:
        self.draft = draft
        self.target = target
        self.translate = not same_vocabulary(draft, target)
        self.ctx = draft.context()
        self.name = f"model {draft.display_name}"

    def propose(self, tokens: Sequence[int], max_drafts: int) -> list[int]:
        ids = self._to_draft_ids(tokens) if self.translate else [int(t) for t in tokens]
        room = self.draft.n_ctx - len(ids)
        max_drafts = min(max_drafts, room)
        if max_drafts < 1 or not ids:
            return []
        held = self.ctx.tokens
        common = 0
        limit = min(len(held), len(ids) - 1)  # keep one token to run: its logits start the drafts
        while common < limit and held[common] == ids[common]:
            common += 1
        self.ctx.truncate(common)
        logits = self.ctx.extend(ids[common:])
        drafts: list[int] = []
        for i in range(max_drafts):
            token = int(np.argmax(logits))
            drafts.append(token)
            if token in self.draft.tokenizer.eog_ids:
                break
            if i + 1 < max_drafts:
                logits = self.ctx.extend([token])
        return self._to_target_ids(drafts)[:max_drafts] if self.translate else drafts

    def _to_draft_ids(self, tokens: Sequence[int]) -> list[int]:
        text = self.target.tokenizer.decode_bytes(tokens).decode("utf-8", errors="replace")
        return self.draft.tokenize(text, add_special=True, parse_special=True)

    def _to_target_ids(self, drafts: list[int]) -> list[int]:
        data = self.draft.tokenizer.decode_bytes(drafts)
        text = data.decode("utf-8", errors="ignore")  # an unfinished character at the end is dropped
        return self.target.tokenize(text, add_special=False, parse_special=True) if text else []

    def close(self) -> None:
        self.ctx.close()
