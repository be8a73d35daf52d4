"""Splitting special-token text out of the input before it is tokenized, as llama.cpp does.

llama.cpp takes the special tokens (control, user-defined and unknown) one at a time, longest
first, and cuts every occurrence of each out of the text pieces still unprocessed. With
parse_special=False control and unknown tokens are skipped, but user-defined ones are still cut
out (Hugging Face tokenizers treat added tokens the same way).

Trying thousands of specials against every input would be slow (gemma has ~6400), so a trie
regex first finds which specials occur in the text at all; the exact longest-first procedure
then runs over just those.
"""
from __future__ import annotations

import re
from typing import AbstractSet, Sequence, Union

from llamay_core.tokenizer.vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN

Fragment = Union[str, int]  # raw text still to tokenize, or a special token id

# C isspace(): what llama.cpp strips next to tokens marked LSTRIP/RSTRIP.
_C_SPACE = " \t\n\v\f\r"


def _trie_pattern(words: Sequence[str]) -> str:
    """A regex matching any of `words`, longest first at a given position, built as a trie so
    that matching costs one branch per character rather than one try per word."""
    root: dict = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        # A word may also end here: make the longer continuation optional (greedy, so tried first).
        return f"(?:{body})?" if "" in node else body

    return emit(root)


class SpecialMatcher:
    """Partitions text into raw pieces and special-token ids."""

    def __init__(self, texts: Sequence[str], attrs: Sequence[int], special_cache: Sequence[int]) -> None:
        self._texts = texts
        self._attrs = attrs
        self._order = {tid: rank for rank, tid in enumerate(special_cache)}
        self._by_text = {texts[tid]: tid for tid in special_cache}
        user = [tid for tid in special_cache if not attrs[tid] & (ATTR_CONTROL | ATTR_UNKNOWN)]
        # Compiled on first use: most calls use only one of the two.
        self._sources = {True: list(special_cache), False: user}
        self._finders: dict[bool, re.Pattern[str] | None] = {}  # None: test each token with `in`
        self._prefixes: dict[str, tuple[int, ...]] = {}

    def _finder(self, parse_special: bool) -> re.Pattern[str] | None:
        if parse_special not in self._finders:
            words = [self._texts[tid] for tid in self._sources[parse_special]]
            try:
                # A zero-width lookahead finds overlapping occurrences too.
                finder = re.compile(f"(?=({_trie_pattern(words)}))") if words else None
            except (RecursionError, re.error, OverflowError):  # absurdly long special tokens
                finder = None
            self._finders[parse_special] = finder
        return self._finders[parse_special]

    def _occurring(self, text: str, parse_special: bool) -> set[int]:
        """The special tokens (of those eligible) that occur anywhere in `text`."""
        sources = self._sources[parse_special]
        if not sources:
            return set()
        finder = self._finder(parse_special)
        if finder is None:
            return {tid for tid in sources if self._texts[tid] in text}
        found: set[int] = set()
        for m in finder.finditer(text):
            found.update(self._with_prefixes(m.group(1)))
        if not parse_special:
            found = {tid for tid in found if not self._attrs[tid] & (ATTR_CONTROL | ATTR_UNKNOWN)}
        return found

    def _with_prefixes(self, text: str) -> tuple[int, ...]:
        """`text`'s token and every special token that is a prefix of it (these occur too)."""
        hit = self._prefixes.get(text)
        if hit is None:
            by_text = self._by_text
            hit = tuple(by_text[text[:k]] for k in range(1, len(text) + 1) if text[:k] in by_text)
            self._prefixes[text] = hit
        return hit

    def partition(self, text: str, parse_special: bool, exclude: AbstractSet[int] = frozenset()) -> list[Fragment]:
        """Split `text` into raw-text pieces and special token ids, in order; the tokens in
        `exclude` are never matched (their text stays raw)."""
        if not text:
            return []
        found = self._occurring(text, parse_special) - exclude
        if not found:
            return [text]
        fragments: list[Fragment] = [text]
        for tid in sorted(found, key=self._order.__getitem__):
            fragments = self._split_all(fragments, tid)
        return fragments

    def _split_all(self, fragments: list[Fragment], tid: int) -> list[Fragment]:
        token = self._texts[tid]
        attr = self._attrs[tid]
        lstrip = attr & ATTR_LSTRIP
        rstrip = attr & ATTR_RSTRIP
        out: list[Fragment] = []
        for frag in fragments:
            if not isinstance(frag, str) or token not in frag:
                out.append(frag)
                continue
            pos = 0
            end = len(frag)
            while True:
                hit = frag.find(token, pos)
                if hit < 0:
                    break
                left = frag[pos:hit]
                if lstrip:
                    left = left.rstrip(_C_SPACE)
                if left:
                    out.append(left)
                out.append(tid)
                pos = hit + len(token)
                if rstrip:
                    while pos < end and frag[pos] in _C_SPACE:
                        pos += 1
            if pos < end:
                out.append(frag[pos:])
        return out
