"""Streaming detokenization: text for generated tokens as they arrive, whole characters only.

A token can end in the middle of a UTF-8 character (byte-level BPE splits rare characters and
emoji across tokens; SentencePiece falls back to `<0xNN>` byte tokens). Printing each piece as it
comes would show replacement characters, so the decoder holds an incomplete trailing sequence
until the bytes that finish it arrive. Bytes that can never form a character become U+FFFD.
"""
from __future__ import annotations

import codecs

from llamay_core.tokenizer.tokenizer import Tokenizer


class IncrementalDecoder:
    """Turns a stream of token ids into text, returning only complete characters.

    The pieces are concatenated as they are, like llama.cpp's per-token streaming: no
    detokenizer space clean-up and no removal of a SentencePiece leading space.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (may be empty)."""
        piece = self.tokenizer.token_bytes(token_id, special=not self.skip_special)
        return self._utf8.decode(piece, final=False) if piece else ""

    def push_many(self, token_ids: list[int]) -> str:
        """Add several tokens at once; return the text they complete."""
        return "".join(self.push(t) for t in token_ids)

    def flush(self) -> str:
        """End of stream: return whatever is held (an unfinished character becomes U+FFFD)."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text

    def reset(self) -> None:
        """Forget any held bytes."""
        self._utf8.reset()

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished character are being held."""
        return bool(self._utf8.getstate()[0])
