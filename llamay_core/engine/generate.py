"""Generation in three layers: a token stream, a text stream with stop rules, and `generate`.

`llamay run`, `bench` and `serve` are thin consumers of the same streams.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import attrs
import numpy as np

from llamay_core.engine.sampling import Sampler, SamplingParams

if TYPE_CHECKING:
    from llamay_core.engine.context import Context


@attrs.define
class GenerationStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    finish_reason: str = ""
    speculative: Any = None  # SpeculativeStats when drafting
    constraint: Any = None  # ConstraintStats when the output is constrained

    def lines(self) -> list[str]:
        """Every `-stats` line: the main one, then drafting and mask cost when they applied."""
        out = [self.line()]
        if self.speculative is not None:
            out.append(self.speculative.line())
        if self.constraint is not None:
            out.append(self.constraint.line(self.generate_seconds))
        return out

    def line(self) -> str:
        """The `-stats` line: prompt and generation rates and why it stopped."""
        def rate(n: int, s: float) -> str:
            return f"{n / s:.1f} tok/s" if s > 0 else "- tok/s"
        prompt = f"prompt {self.prompt_tokens} tokens in {self.prompt_seconds:.3f}s ({rate(self.prompt_tokens - self.cached_tokens, self.prompt_seconds)})"
        if self.cached_tokens:
            prompt += f" · {self.cached_tokens} cached"
        gen = f"generated {self.generated_tokens} in {self.generate_seconds:.3f}s ({rate(self.generated_tokens, self.generate_seconds)})"
        return f"{prompt} · {gen} · stop: {self.finish_reason}"


class Generation:
    """One request's decoding loop over a Context: prompt ids in, tokens and text out."""

    def __init__(self, ctx: "Context", prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int,
                 stop: Sequence[str] = (), ignore_eos: bool = False, speculative: Any = None,
                 constraint: Any = None) -> None:
        """speculative: a SpeculativeConfig (drafts verified in one target pass; same output).
        constraint: a `llamay_core.constrain` Constraint masking every token's logits."""
        self.ctx = ctx
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.sampler = Sampler(params)
        self.max_tokens = max_tokens
        self.stop = [s for s in stop if s]
        self.ignore_eos = ignore_eos
        self.speculative = speculative
        self.constraint = constraint
        self.stats = GenerationStats()
        if constraint is not None:
            self.stats.constraint = constraint.stats
        self.generated: list[int] = []

    def tokens(self) -> Iterator[int]:
        """Prefill the prompt, then yield sampled tokens until EOS or max_tokens."""
        t0 = time.perf_counter()
        logits = self.ctx.extend(self.prompt_ids)
        self.stats.prompt_tokens = len(self.prompt_ids)
        self.stats.cached_tokens = self.ctx.last_cached_tokens
        self.stats.prompt_seconds = time.perf_counter() - t0
        history = list(self.ctx.tokens)
        t1 = time.perf_counter()
        try:
            if self.speculative is not None:
                from llamay_core.speculative.decode import speculative_tokens

                yield from speculative_tokens(self, logits, history)
                return
            while True:
                token = self._pick(logits, history)
                if not self.record(token, history):
                    return
                yield token
                if self.finished_after_yield():
                    return
                logits = self.ctx.extend([token])
        finally:
            self.stats.generate_seconds = time.perf_counter() - t1

    def record(self, token: int, history: list[int]) -> bool:
        """Keep an emitted token; False when it is an end-of-generation token (never shown)."""
        self.generated.append(token)
        history.append(token)
        self.stats.generated_tokens = len(self.generated)
        if token in self.ctx.model.tokenizer.eog_ids and not self.ignore_eos:
            self.stats.finish_reason = "eos"
            return False
        return True

    def finished_after_yield(self) -> bool:
        """Whether the token just yielded ends generation: the grammar is complete, or max_tokens."""
        if self.constraint is not None and self.constraint.finished:
            self.stats.finish_reason = "stop"
            return True
        if len(self.generated) >= self.max_tokens:
            self.stats.finish_reason = "length"
            return True
        return False

    def _pick(self, logits: np.ndarray, history: Sequence[int]) -> int:
        """Sample the next token, within the constraint's allowed tokens when there is one."""
        if self.constraint is None:
            return self.sampler.sample(logits, history)
        token = self.sampler.sample(self.constraint.mask_logits(logits), history)
        if token not in self.ctx.model.tokenizer.eog_ids:
            self.constraint.advance(token)
        return token

    def text(self) -> Iterator[str]:
        """Yield text pieces; stop strings end the text and are never shown."""
        from llamay_core.tokenizer import IncrementalDecoder

        decoder = IncrementalDecoder(self.ctx.model.tokenizer)
        pending = ""
        longest = max((len(s) for s in self.stop), default=0)
        for token in self.tokens():
            pending += decoder.push(token)
            if self.stop:
                hit = _first_stop(pending, self.stop)
                if hit is not None:
                    if pending[:hit]:
                        yield pending[:hit]
                    self.stats.finish_reason = "stop"
                    return
                keep = _holdback(pending, self.stop, longest)
                if len(pending) > keep:
                    yield pending[:len(pending) - keep]
                    pending = pending[len(pending) - keep:]
            elif pending:
                yield pending
                pending = ""
        pending += decoder.flush()
        if self.stop:
            hit = _first_stop(pending, self.stop)
            if hit is not None:
                pending = pending[:hit]
                self.stats.finish_reason = "stop"
        if pending:
            yield pending


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _holdback(text: str, stops: Sequence[str], longest: int) -> int:
    """How many trailing characters could still become a stop string."""
    for n in range(min(longest - 1, len(text)), 0, -1):
        tail = text[-n:]
        if any(s.startswith(tail) for s in stops):
            return n
    return 0

