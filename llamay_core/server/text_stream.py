"""Token ids to text pieces, one token at a time, with stop strings.

The same rules as `Generation.text()` (engine/generate.py), which pulls tokens from its own loop;
the scheduler instead pushes each sampled token as its batch step finishes, so this is the
push-driven form of those rules, sharing their helpers.
"""
from __future__ import annotations

from typing import Any, Sequence

from llamay_core.engine.generate import _first_stop, _holdback
from llamay_core.tokenizer import IncrementalDecoder


class TextStream:
    """Text for a stream of tokens; a stop string ends the text and is never shown."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] = ()) -> None:
        self.decoder = IncrementalDecoder(tokenizer)
        self.stop = [s for s in stop if s]
        self.longest = max((len(s) for s in self.stop), default=0)
        self.pending = ""
        self.stopped = False
        self.stop_word = ""  # the stop string that ended the text, once one has

    def push(self, token: int) -> str:
        """Add one token; return the text that can be shown now (may be empty)."""
        if self.stopped:
            return ""
        self.pending += self.decoder.push(token)
        return self._release(final=False)

    def finish(self) -> str:
        """End of the stream: the text still held back."""
        if self.stopped:
            return ""
        self.pending += self.decoder.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if not self.stop:
            out, self.pending = self.pending, ""
            return out
        hit = _first_stop(self.pending, self.stop)
        if hit is not None:
            self.stop_word = next(s for s in self.stop if self.pending.find(s) == hit)
            out, self.pending = self.pending[:hit], ""
            self.stopped = True
            return out
        keep = 0 if final else _holdback(self.pending, self.stop, self.longest)
        cut = len(self.pending) - keep
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out
