"""GPT-2 style byte-level BPE (`tokenizer.ggml.model == "gpt2"`), as llama.cpp tokenizes it.

Each pre-tokenized word is turned into its UTF-8 bytes, each byte shown as one printable
character (GPT-2's byte-to-unicode table), and adjacent symbols are merged by merge rank:
lowest rank first, leftmost first on ties, until no ranked pair is left.

Two engines do this:
- `tokenizers.models.BPE` (Rust) -- the fast path, used whenever the vocabulary lets it be built
  (it insists that every merge's parts and result are tokens);
- `PyBpe` -- a plain-Python transcription of the same algorithm with a per-word cache, used
  otherwise and by the tests as an independent check of the fast path.
"""
from __future__ import annotations

import heapq
from typing import Mapping, Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from llamay_core.tokenizer.pretokenize import PreTokenizerSpec, build_splitter


def _bytes_to_unicode() -> list[str]:
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the rest map to U+0100 on."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = [""] * 256
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_TO_CHAR: tuple[str, ...] = tuple(_bytes_to_unicode())
CHAR_TO_BYTE: dict[str, int] = {ch: b for b, ch in enumerate(BYTE_TO_CHAR)}
# str.translate table: Latin-1 decoded bytes -> GPT-2 characters.
_ENCODE_TABLE = {b: ch for b, ch in enumerate(BYTE_TO_CHAR)}


def bytes_to_symbols(data: bytes) -> str:
    """UTF-8 bytes as GPT-2 byte characters (one character per byte)."""
    return data.decode("latin-1").translate(_ENCODE_TABLE)


def symbols_to_bytes(text: str) -> bytes | None:
    """The bytes a byte-level token stands for, or None if it has a character outside the table."""
    try:
        return bytes([CHAR_TO_BYTE[ch] for ch in text])
    except KeyError:
        return None


def parse_merges(merges: Sequence[str]) -> list[tuple[str, str]]:
    """`"a b"` merge strings as pairs, split like llama.cpp (at the first space after the first
    character), keeping only the first occurrence of a pair."""
    seen: set[tuple[str, str]] = set()
    pairs = []
    for m in merges:
        pos = m.find(" ", 1)
        pair = (m[:pos], m[pos + 1:])
        # A merge without two non-empty parts can never apply (symbols are never empty).
        if pos >= 0 and pair[1] and pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs


class PyBpe:
    """llama.cpp's BPE merge loop in plain Python, with a cache of words already seen."""

    def __init__(self, token_to_id: Mapping[str, int], pairs: Sequence[tuple[str, str]],
                 ignore_merges: bool = False) -> None:
        self._t2i = token_to_id
        self._ranks = {pair: rank for rank, pair in enumerate(pairs)}
        self._ignore_merges = ignore_merges
        self._cache: dict[str, tuple[int, ...]] = {}

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Token ids of one pre-tokenized word, given in GPT-2 byte characters."""
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        ids = self._merge(word)
        if len(self._cache) > 100_000:  # bound memory on endless unique input
            self._cache.clear()
        self._cache[word] = ids
        return ids

    def _merge(self, word: str) -> tuple[int, ...]:
        t2i = self._t2i
        if self._ignore_merges and word in t2i:
            return (t2i[word],)
        syms = list(word)
        n = len(syms)
        if n == 0:
            return ()
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        ranks = self._ranks
        heap: list[tuple[int, int, int, str]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            rank = ranks.get((syms[left], syms[right]))
            if rank is not None:
                heapq.heappush(heap, (rank, left, right, syms[left] + syms[right]))

        for i in range(1, n):
            push(i - 1, i)
        while heap:
            _, left, right, text = heapq.heappop(heap)
            # A queued pair is stale once either side changed: its text no longer matches.
            if not syms[left] or not syms[right] or syms[left] + syms[right] != text:
                continue
            syms[left] = text
            syms[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            push(prv[left], left)
            push(left, nxt[left])

        out: list[int] = []
        for sym in syms:
            if not sym:
                continue
            tid = t2i.get(sym)
            if tid is not None:
                out.append(tid)
                continue
            # A symbol that is not a token: llama.cpp looks up each of its UTF-8 bytes as a
            # one-byte token text, which only ever succeeds for ASCII; the rest are dropped.
            for ch in sym:
                if ord(ch) < 0x80:
                    tid = t2i.get(ch)
                    if tid is not None:
                        out.append(tid)
        return tuple(out)


class BpeEncoder:
    """Encodes plain text (no special tokens) with a byte-level BPE vocabulary."""

    def __init__(self, texts: Sequence[str], token_to_id: Mapping[str, int], merges: Sequence[str],
                 spec: PreTokenizerSpec, *, use_fast: bool = True) -> None:
        self.spec = spec
        self._splitter = build_splitter(spec)
        pairs = parse_merges(merges)
        self._fast: HFTokenizer | None = None
        self._placeholder_from = -1  # fast path ids >= this are placeholders (-1: none)
        built = _build_fast(token_to_id, pairs, spec, self._splitter) if use_fast else None
        if built is not None:
            self._fast, self._placeholder_from = built
        self._slow: PyBpe | None = None
        if self._fast is None:
            self._slow = PyBpe(token_to_id, pairs, spec.ignore_merges)
        self._pairs = pairs
        self._token_to_id = token_to_id

    @property
    def is_fast(self) -> bool:
        return self._fast is not None

    def words(self, text: str) -> list[str]:
        """The pre-tokenized words of `text` (before byte mapping)."""
        return [w for w, _ in self._splitter.pre_tokenize_str(text)]

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._fast is not None:
            ids = self._fast.encode(text, add_special_tokens=False).ids
            if self._placeholder_from >= 0:
                ids = [i for i in ids if i < self._placeholder_from]
            return ids
        slow = self._slow
        assert slow is not None
        out: list[int] = []
        for word in self.words(text):
            out.extend(slow.word_ids(bytes_to_symbols(word.encode("utf-8"))))
        return out

    def reference(self) -> "BpeEncoder":
        """The same encoder on the plain-Python engine (for cross-checking the fast path)."""
        ref = BpeEncoder.__new__(BpeEncoder)
        ref.spec = self.spec
        ref._splitter = self._splitter
        ref._fast = None
        ref._placeholder_from = -1
        ref._slow = PyBpe(self._token_to_id, self._pairs, self.spec.ignore_merges)
        ref._pairs = self._pairs
        ref._token_to_id = self._token_to_id
        return ref


def _build_fast(token_to_id: Mapping[str, int], pairs: list[tuple[str, str]], spec: PreTokenizerSpec,
                splitter: pre_tokenizers.PreTokenizer) -> tuple[HFTokenizer, int] | None:
    """A Rust BPE with the same splitting, or None where the vocabulary does not allow one.

    Returns the tokenizer and the vocabulary size: ids at or past it are placeholders to drop.
    """
    vocab = dict(token_to_id)
    for a, b in pairs:
        # The Rust builder rejects merges whose parts or result are not tokens; llama.cpp would
        # still apply them (then spell the result out in bytes), so only the Python path is exact.
        if a not in vocab or b not in vocab or (a + b) not in vocab:
            return None
    # A byte missing from the vocabulary (SmolLM2 lacks a few) stays a symbol in llama.cpp: it
    # blocks merges across it and is dropped from the output. The Rust BPE would drop it *before*
    # merging, joining its neighbours, so give it a placeholder id that we filter out afterwards.
    n_vocab = max(vocab.values(), default=-1) + 1
    for ch in BYTE_TO_CHAR:
        if ch not in vocab:
            vocab[ch] = n_vocab + len(vocab) - len(token_to_id)
    try:
        model = models.BPE(vocab=vocab, merges=pairs, ignore_merges=spec.ignore_merges)
    except Exception:  # noqa: BLE001 - any refusal means "use the Python engine"
        return None
    tok = HFTokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [splitter, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    return tok, (n_vocab if len(vocab) > len(token_to_id) else -1)
