"""llguidance, adapted to llamay: one LLTokenizer per vocabulary, one matcher per generation.

llguidance was chosen over xgrammar and outlines-core (docs/constrained-output.md has the
measurements): it computes a mask in tens of microseconds without precomputing per-state token
tables, reads JSON Schema, Lark and GBNF (llama.cpp's grammar format) and regexes, and installs
as one wheel with no dependencies.
"""
from __future__ import annotations

import json
import time
import weakref
from typing import Any, Sequence

import attrs
import numpy as np

from llamay_core.constrain.mask import apply_mask, bitmask_words
from llamay_core.errors import ConstraintLimitError, UsageError

_LL_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


@attrs.define
class ConstraintStats:
    """What the mask cost in one generation: the `-stats` constraint line."""

    kind: str
    masks: int = 0
    mask_seconds: float = 0.0

    def line(self, decode_seconds: float) -> str:
        per = 1000 * self.mask_seconds / self.masks if self.masks else 0.0
        share = 100 * self.mask_seconds / decode_seconds if decode_seconds > 0 else 0.0
        return f"constraint {self.kind} · mask {per:.2f} ms per token · {share:.1f}% of decode time · {self.masks} masks"


class _VocabForLLGuidance:
    """What llguidance's TokenizerWrapper reads: token bytes, special ids and an encoder."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_id if tokenizer.eos_id is not None else min(tokenizer.eog_ids)
        self.bos_token_id = tokenizer.bos_id
        specials, tokens = [], []
        for i in range(tokenizer.n_vocab):
            piece = tokenizer.token_bytes(i)
            if tokenizer.is_control(i):
                # llguidance's convention for special tokens: a 0xff prefix keeps them out of text.
                piece = b"\xff" + piece
                specials.append(i)
            tokens.append(piece)
        self.tokens = tokens
        self.special_token_ids = specials

    def __call__(self, text: bytes | str) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


def ll_tokenizer(tokenizer: Any) -> Any:
    """The llguidance tokenizer for a llamay Tokenizer (built once per tokenizer: ~0.1-0.5 s)."""
    import llguidance

    cached = _LL_TOKENIZERS.get(tokenizer)
    if cached is None:
        vocab = _VocabForLLGuidance(tokenizer)
        eos = [vocab.eos_token_id] + sorted(set(tokenizer.eog_ids) - {vocab.eos_token_id})
        cached = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab), n_vocab=tokenizer.n_vocab, eos_token=eos)
        _LL_TOKENIZERS[tokenizer] = cached
    return cached


def compile_grammar(tokenizer: Any, kind: str, text: str | dict) -> "Grammar":
    """Compile a grammar for `tokenizer`. kind: json_schema, grammar (GBNF or Lark) or regex."""
    import llguidance

    try:
        if kind == "json_schema":
            spec = llguidance.LLMatcher.grammar_from_json_schema(
                text if isinstance(text, str) else json.dumps(text),
                defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
        elif kind == "grammar":
            spec = llguidance.grammar_from("grammar", text)
        elif kind == "regex":
            spec = llguidance.LLMatcher.grammar_from_regex(text)
        else:
            raise UsageError(f"unknown constraint kind {kind!r}")
    except ValueError as exc:
        raise UsageError(f"bad {kind.replace('_', ' ')}: {_one_line(exc)}") from None
    t0 = time.perf_counter()
    matcher = llguidance.LLMatcher(ll_tokenizer(tokenizer), spec, log_level=0)
    if matcher.is_error():
        raise UsageError(f"bad {kind.replace('_', ' ')}: {_one_line(matcher.get_error())}")
    return Grammar(kind, tokenizer, matcher, time.perf_counter() - t0)


def _one_line(message: object) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= 300 else text[:297] + "..."


class Grammar:
    """A compiled grammar; `start()` gives each generation its own Constraint."""

    def __init__(self, kind: str, tokenizer: Any, matcher: Any, compile_seconds: float) -> None:
        self.kind = kind
        self.tokenizer = tokenizer
        self._matcher = matcher
        self.compile_seconds = compile_seconds

    def start(self) -> "Constraint":
        return Constraint(self.kind, self._matcher.deep_copy(), self.tokenizer.n_vocab)


class Constraint:
    """One generation's position in a grammar: masks logits, advances by the chosen token."""

    def __init__(self, kind: str, matcher: Any, n_vocab: int) -> None:
        self.kind = kind
        self.matcher = matcher
        self.bitmask = np.full(bitmask_words(n_vocab), -1, np.int32)
        self.stats = ConstraintStats(kind)

    def mask_logits(self, logits: np.ndarray) -> np.ndarray:
        """`logits` with the tokens the grammar forbids here at -inf."""
        t0 = time.perf_counter()
        self.matcher.unsafe_compute_mask_ptr(self.bitmask.ctypes.data, self.bitmask.nbytes)
        out = apply_mask(logits, self.bitmask)
        self.stats.mask_seconds += time.perf_counter() - t0
        self.stats.masks += 1
        return out

    def advance(self, token: int) -> None:
        """Record the chosen token (it was allowed by the last mask, so this cannot fail)."""
        if not self.matcher.consume_token(int(token)):
            # the grammar allowed the token but its parser hit a limit (e.g. too many items):
            # llguidance's message carries its whole state, so only its first line goes on
            first_line = (str(self.matcher.get_error() or "").splitlines() or ["no reason given"])[0]
            raise ConstraintLimitError(f"the {self.kind.replace('_', ' ')} could not be followed past token {token}: "
                                       f"{_one_line(first_line)}")

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the grammar allows in a row from here (drafts past it are cut)."""
        return int(self.matcher.validate_tokens([int(t) for t in tokens]))

    @property
    def finished(self) -> bool:
        """The grammar is complete and allows nothing more but end of text."""
        return bool(self.matcher.is_stopped())
