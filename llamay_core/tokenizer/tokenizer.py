"""`Tokenizer`: text <-> token ids for a GGUF model, matching llama.cpp's tokenize/detokenize.

Encoding: BOS (if the model asks for it and add_special) -> special-token partitioning ->
each raw piece through the family's encoder (byte-level BPE or SentencePiece) -> EOS (if asked).
Decoding: each token's piece (bytes) concatenated, then llama.cpp's space clean-up where the
pre-tokenizer family enables it, then UTF-8 with invalid bytes replaced.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Iterable, Mapping, Sequence

from llamay_core.tokenizer.bpe import BpeEncoder, symbols_to_bytes
from llamay_core.tokenizer.pretokenize import PreTokenizerSpec, pretokenizer_spec
from llamay_core.tokenizer.special import Fragment, SpecialMatcher
from llamay_core.tokenizer.spm import SPACE_ESCAPE, SpmEncoder
from llamay_core.tokenizer.vocab import (
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_NORMAL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    Vocab,
    build_vocab,
)

SUPPORTED_MODELS = ("gpt2", "llama")
_RENDERED_RAW = ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED


class Tokenizer:
    """A model's tokenizer, built from GGUF metadata with `Tokenizer.from_metadata`."""

    def __init__(self, vocab: Vocab, encoder: BpeEncoder | SpmEncoder, *, pre: str,
                 spec: PreTokenizerSpec | None) -> None:
        self.vocab = vocab
        self._encoder = encoder
        self.pre = pre
        self.spec = spec
        # SentencePiece vocabularies never clean spaces; BPE ones by pre-tokenizer family.
        self.clean_spaces = spec.clean_spaces if spec is not None else False
        self._special = SpecialMatcher(vocab.texts, vocab.token_attrs, vocab.special_cache)
        self._pieces: list[bytes | None] = [None] * vocab.n_tokens  # filled on first use

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> "Tokenizer":
        """Build from a GGUF metadata dict (`open_gguf(path).metadata`).

        Raises ValueError with a one-line message for an unsupported tokenizer.ggml.model or
        tokenizer.ggml.pre, or for a malformed vocabulary.
        """
        model = metadata.get("tokenizer.ggml.model")
        if model not in SUPPORTED_MODELS:
            raise ValueError(f"unsupported tokenizer.ggml.model {model!r} (supported: {', '.join(SUPPORTED_MODELS)})")
        if model == "gpt2":
            pre = str(metadata.get("tokenizer.ggml.pre") or "default")
            spec = pretokenizer_spec(pre)
            vocab = build_vocab(metadata, model, pre=pre, bpe_add_bos=spec.add_bos, bos_disabled=spec.bos_disabled)
            merges = metadata.get("tokenizer.ggml.merges")
            if not isinstance(merges, (list, tuple)):
                raise ValueError("GGUF has no tokenizer.ggml.merges list for its BPE vocabulary")
            encoder: BpeEncoder | SpmEncoder = BpeEncoder(vocab.texts, vocab.token_to_id, merges, spec)
            return cls(vocab, encoder, pre=pre, spec=spec)
        vocab = build_vocab(metadata, model)
        encoder = SpmEncoder(vocab.token_to_id, vocab.scores, vocab.special("unk"))
        return cls(vocab, encoder, pre="default", spec=None)

    # ----------------------------------------------------------------- properties

    @property
    def model(self) -> str:
        """"gpt2" (byte-level BPE) or "llama" (SentencePiece-style)."""
        return self.vocab.model

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    @property
    def bos_id(self) -> int | None:
        return self.vocab.special("bos")

    @property
    def eos_id(self) -> int | None:
        return self.vocab.special("eos")

    @property
    def eot_id(self) -> int | None:
        return self.vocab.special("eot")

    @property
    def unk_id(self) -> int | None:
        return self.vocab.special("unk")

    @property
    def pad_id(self) -> int | None:
        return self.vocab.special("pad")

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    @property
    def eog_ids(self) -> frozenset[int]:
        """Ids that end generation: EOS/EOT/EOM, end-of-turn tokens found by text, FIM pad/rep/sep."""
        return self.vocab.eog_ids

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.vocab.eog_ids

    def is_control(self, token_id: int) -> bool:
        """Whether the token is a control token (after llama.cpp's by-text fix-ups)."""
        return bool(self.vocab.token_attrs[self._check(token_id)] & ATTR_CONTROL)

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the vocabulary (byte-level or '▁'-escaped)."""
        return self.vocab.texts[self._check(token_id)]

    def token_to_id(self, text: str) -> int | None:
        """The id of a token given its vocabulary text, or None."""
        return self.vocab.token_to_id.get(text)

    # ----------------------------------------------------------------- encoding

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids for `text`, exactly as llama.cpp's `llama_tokenize`.

        add_special: add BOS/EOS where the model asks for them. parse_special: text such as
        `<|im_start|>` becomes its control token; otherwise only user-defined tokens are
        recognised and control-token text is tokenized as ordinary text.
        """
        return self._encode_fragments(self._special.partition(_valid_unicode(text), parse_special), add_special)

    def special_tokens_in(self, text: str) -> set[int]:
        """The special tokens (control or user-defined) that encoding `text` with parse_special finds."""
        return {f for f in self._special.partition(_valid_unicode(text), True) if not isinstance(f, str)}

    def encode_parts(self, parts: Sequence[tuple[str, bool]], add_special: bool = True,
                     literal: AbstractSet[int] = frozenset()) -> list[int]:
        """Token ids for the concatenation of `parts`, each a (text, parse_special) pair.

        A chat prompt is the template's own text (whose markers are special tokens) around
        message contents (whose look-alike markers must stay plain text, or a user could close
        their turn). Parts without parse_special also never match the tokens in `literal`, even
        user-defined ones (which llama.cpp matches without parse_special, and some templates use
        as markers). Raw text on both sides of a part boundary is joined before encoding, so the
        ids equal `encode` of the whole text wherever no special token is involved.
        """
        fragments: list[Fragment] = []
        for text, parse_special in parts:
            exclude = frozenset() if parse_special else literal
            for frag in self._special.partition(_valid_unicode(text), parse_special, exclude):
                if isinstance(frag, str) and fragments and isinstance(fragments[-1], str):
                    fragments[-1] += frag
                else:
                    fragments.append(frag)
        return self._encode_fragments(fragments, add_special)

    def _encode_fragments(self, fragments: list[Fragment], add_special: bool) -> list[int]:
        vocab = self.vocab
        out: list[int] = []
        if add_special and vocab.add_bos:
            out.append(vocab.special_ids["bos"])
        encoder = self._encoder
        if isinstance(encoder, SpmEncoder):
            # SentencePiece adds its space prefix to the text at the start and after each special.
            prefix = " " if vocab.add_space_prefix else ""
            prev_special = True
            for frag in fragments:
                if isinstance(frag, str):
                    out.extend(encoder.encode(prefix + frag if prev_special else frag))
                    prev_special = False
                else:
                    out.append(frag)
                    prev_special = True
        else:
            for frag in fragments:
                if isinstance(frag, str):
                    out.extend(encoder.encode(frag))
                else:
                    out.append(frag)
        if add_special and vocab.add_eos:
            out.append(vocab.special_ids["eos"])
        return out

    # ----------------------------------------------------------------- decoding

    def token_bytes(self, token_id: int, special: bool = True) -> bytes:
        """The bytes one token stands for (llama.cpp's token piece).

        Byte-level tokens are mapped back to raw bytes, SentencePiece '▁' becomes a space and
        `<0xNN>` its byte. Control and unknown tokens render as their text, or as nothing when
        `special` is False; unused tokens render as nothing.
        """
        token_id = self._check(token_id)
        if not special and self.vocab.token_attrs[token_id] & (ATTR_CONTROL | ATTR_UNKNOWN):
            return b""
        piece = self._pieces[token_id]
        if piece is None:
            piece = self._pieces[token_id] = self._make_piece(token_id)
        return piece

    def _make_piece(self, token_id: int) -> bytes:
        attr = self.vocab.token_attrs[token_id]
        text = self.vocab.texts[token_id]
        if attr & _RENDERED_RAW:
            return text.encode("utf-8")
        if attr & ATTR_NORMAL:
            if self.vocab.model == "llama":
                return text.replace(SPACE_ESCAPE, " ").encode("utf-8")
            data = symbols_to_bytes(text)
            if data is None:
                data = _decode_text_with_unknowns(text)
            return data
        if attr & ATTR_BYTE:
            try:
                return bytes([int(text[3:5], 16)])
            except ValueError:
                return b""
        return b""  # unused / undefined tokens render as nothing, as in llama.cpp

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        """The raw bytes of `ids` detokenized (see `decode`)."""
        ids = list(ids)
        vocab = self.vocab
        remove_space = vocab.add_space_prefix
        if skip_special and vocab.add_bos and ids and ids[0] == vocab.special("bos"):
            remove_space = False
            ids = ids[1:]
        if skip_special and vocab.add_eos and ids and ids[-1] == vocab.special("eos"):
            ids = ids[:-1]
        parts = [self.token_bytes(t, special=not skip_special) for t in ids]
        if remove_space and parts and parts[0][:1] == b" ":
            # SentencePiece's space prefix is not part of the text.
            parts[0] = parts[0][1:]
        data = b"".join(parts)
        return _clean_spaces(data) if self.clean_spaces else data

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text for `ids`, like llama.cpp's `llama_detokenize`.

        Control tokens render as their text unless skip_special (which also drops a leading BOS
        and trailing EOS that the model adds itself). Invalid UTF-8 becomes U+FFFD.
        """
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def _check(self, token_id: int) -> int:
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab.n_tokens:
            raise ValueError(f"token id {token_id} is out of range for a vocabulary of {self.vocab.n_tokens}")
        return token_id

    def __repr__(self) -> str:
        return f"Tokenizer(model={self.model!r}, pre={self.pre!r}, n_vocab={self.n_vocab})"


def _valid_unicode(text: str) -> str:
    """`text` with lone surrogates (which have no UTF-8 form) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _decode_text_with_unknowns(text: str) -> bytes:
    """Byte-level decoding of a token that has characters outside GPT-2's byte table.

    llama.cpp writes such a character as `[UNK_BYTE_0x<hex of its UTF-8>` + the token text + `]`.
    """
    out = bytearray()
    for ch in text:
        data = symbols_to_bytes(ch)
        if data is not None:
            out += data
        else:
            out += b"[UNK_BYTE_0x" + ch.encode("utf-8").hex().encode() + text.encode("utf-8") + b"]"
    return bytes(out)


def _clean_spaces(data: bytes) -> bytes:
    """llama.cpp's detokenizer clean-up for BPE families that enable it.

    1. drop a space before '?', '!', '.', ','; 2. " ' " becomes "'"; 3. drop a space before the
    contractions 's, 'm, 're, 've.
    """
    for p in (b" ?", b" !", b" .", b" ,"):
        if p in data:
            data = data.replace(p, p[1:])
    if b" ' " in data:
        text = bytearray(data)
        n = len(text)
        total = 1 if n else 0
        i = 1
        while i < n:
            x = text[i]
            if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
                total -= 1           # the space before
                i += 1
                text[i] = 0          # and the one after, which also stops a chained match
            text[total] = x
            total += 1
            i += 1
        data = bytes(text[:total])
    if b" '" in data:
        text = bytearray(data)
        n = len(text)
        total = 1 if n else 0
        for i in range(1, n):
            x = text[i]
            if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
                x1 = text[i + 1]
                if x1 in b"sm":
                    total -= 1
                elif x1 not in b"td" and i + 2 < n:
                    pair = bytes(text[i + 1:i + 3])
                    if pair in (b"re", b"ve"):
                        total -= 1
            text[total] = x
            total += 1
        data = bytes(text[:total])
    return data
