"""A conversation kept in one engine Context: each turn prefills only what is new.

Every turn renders the whole conversation in the model's chat format, tokenizes it, and keeps
the context's tokens up to where they first differ from that rendering; only the rest is
prefilled. The history's KV is therefore computed once, whatever the template does.
"""
from __future__ import annotations

from typing import Any, Iterator

import attrs

from llamay_core.errors import ContextOverflowError


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ChatSession:
    """Messages, the system message and the Context that holds their KV."""

    def __init__(self, model: Any, system: str | None = None, max_tokens: int = -1,
                 options: dict[str, Any] | None = None) -> None:
        from llamay_core.engine.chat_template import template_source

        template_source(model)  # no chat format: refuse now, in one line, before the first turn
        self.model = model
        self.system = system
        self.max_tokens = max_tokens  # -1: until the end of the reply or of the context
        self.options = dict(options or {})
        self.messages: list[dict[str, str]] = []
        self.ctx = model.context()
        self.last_stats: Any = None

    def set_system(self, text: str | None) -> None:
        self.system = text or None

    def clear(self) -> None:
        """Forget the conversation (the system message stays)."""
        self.messages = []
        self.ctx.truncate(0)

    def conversation(self) -> list[dict[str, str]]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.messages

    def reply(self, text: str) -> Iterator[str]:
        """Stream the model's answer to `text`; the turn is kept even when interrupted."""
        turn = {"role": "user", "content": text}
        ids = self.model.tokenize(self.model.chat_prompt(self.conversation() + [turn]), parse_special=True)
        room = self.model.n_ctx - len(ids)
        if room < 1:
            raise ContextOverflowError(f"the conversation no longer fits the context of {self.model.n_ctx} tokens "
                                       "(/clear starts over)")
        keep = min(common_prefix(self.ctx.tokens, ids), len(ids) - 1)  # at least one new token gives logits
        self.ctx.truncate(keep)
        self.messages.append(turn)
        max_tokens = room if self.max_tokens < 1 else min(self.max_tokens, room)
        pieces: list[str] = []
        try:
            for piece in self.model.generate(ids[keep:], max_tokens=max_tokens, stream=True, context=self.ctx,
                                             **self.options):
                pieces.append(piece)
                yield piece
        finally:
            # Ctrl-C inside a pass can leave KV written past the context's tokens: drop it.
            if self.ctx.seq.length > len(self.ctx.tokens):
                self.ctx.seq.truncate(len(self.ctx.tokens))
            self.messages.append({"role": "assistant", "content": "".join(pieces)})
            if self.model.last_stats is not None:
                self.last_stats = attrs.evolve(self.model.last_stats, prompt_tokens=len(ids), cached_tokens=keep)

    def close(self) -> None:
        self.ctx.close()
