"""The vocabulary from a GGUF file's `tokenizer.ggml.*` metadata, with llama.cpp's load-time fix-ups.

llama.cpp does not take the file's token types at face value: it marks tokens as control or
end-of-generation by their text (`<|im_end|>`, `</s>`, FIM tokens, ...), defaults the BOS/EOS ids
by tokenizer family, and tags some tokens to strip neighbouring whitespace. Tokenization depends
on these attributes (control and user-defined tokens are split out of the text before anything
else), so this module reproduces them; `Vocab` is the result, shared by the encoders and decoder.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import attrs

# Token attribute bits, the same values llama.cpp uses (llama_token_attr), kept as plain ints:
# a vocabulary has up to ~260k tokens, and enum.IntFlag arithmetic is too slow for that.
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_NORMALIZED = 1 << 6
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9

# GGUF `tokenizer.ggml.token_type` values -> attribute bits.
_TYPE_TO_ATTR = {
    1: ATTR_NORMAL,
    2: ATTR_UNKNOWN,
    3: ATTR_CONTROL,
    4: ATTR_USER_DEFINED,
    5: ATTR_UNUSED,
    6: ATTR_BYTE,
}

K = "tokenizer.ggml."

# Texts llama.cpp recognises as end-of-turn / end-of-generation / FIM tokens when the file does
# not say so. Matching tokens also become control tokens (so they are parsed as specials).
_EOT_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
})
_EOM_TEXTS = frozenset({"<|eom_id|>"})
_FIM_TEXTS = {
    "fim_pre": frozenset({"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                          "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}),
    "fim_suf": frozenset({"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                          "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}),
    "fim_mid": frozenset({"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                          "▁<MID>", "<|code_middle|>", "<|middle|>"}),
    "fim_pad": frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    "fim_rep": frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}),
    "fim_sep": frozenset({"<|file_sep|>"}),
}
_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
})
# gpt-oss chat markers that llama.cpp always renders, whatever the file says.
_FORCED_USER_DEFINED = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})

# (metadata key suffix, Vocab field) in llama.cpp's order; later keys win for the same field.
_SPECIAL_ID_KEYS = (
    ("bos_token_id", "bos"), ("eos_token_id", "eos"), ("eot_token_id", "eot"),
    ("eom_token_id", "eom"), ("unknown_token_id", "unk"), ("seperator_token_id", "sep"),
    ("padding_token_id", "pad"), ("mask_token_id", "mask"),
    ("fim_pre_token_id", "fim_pre"), ("fim_suf_token_id", "fim_suf"),
    ("fim_mid_token_id", "fim_mid"), ("fim_pad_token_id", "fim_pad"),
    ("fim_rep_token_id", "fim_rep"), ("fim_sep_token_id", "fim_sep"),
    ("prefix_token_id", "fim_pre"), ("suffix_token_id", "fim_suf"), ("middle_token_id", "fim_mid"),
)


@attrs.frozen
class VocabDefaults:
    """What a tokenizer family assumes before the file's own keys are read."""

    bos: int | None
    eos: int | None
    unk: int | None
    add_bos: bool
    add_space_prefix: bool


# llama.cpp's per-family defaults (SPM = "llama", BPE = "gpt2").
FAMILY_DEFAULTS = {
    "llama": VocabDefaults(bos=1, eos=2, unk=0, add_bos=True, add_space_prefix=True),
    "gpt2": VocabDefaults(bos=11, eos=11, unk=None, add_bos=False, add_space_prefix=False),
}


@attrs.frozen
class Vocab:
    """Token texts, scores and attributes plus the special ids, as llama.cpp sees them."""

    model: str                              # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    texts: tuple[str, ...] = attrs.field(repr=False)
    scores: tuple[float, ...] = attrs.field(repr=False)
    token_attrs: tuple[int, ...] = attrs.field(repr=False)
    token_to_id: Mapping[str, int] = attrs.field(repr=False)
    special_ids: Mapping[str, int] = attrs.field(repr=False)  # field name -> id, only those set
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int]
    # Control, user-defined and unknown tokens in the order llama.cpp tries to match them in text:
    # longest (in UTF-8 bytes) first.
    special_cache: tuple[int, ...] = attrs.field(repr=False)

    @property
    def n_tokens(self) -> int:
        return len(self.texts)

    def special(self, name: str) -> int | None:
        """The id of a special token by field name ("bos", "eos", "eot", ...), or None."""
        return self.special_ids.get(name)


def _as_bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, (list, tuple)):  # defensive: a one-element array
        return bool(value[0]) if value else default
    return bool(value)


def build_vocab(
    metadata: Mapping[str, Any],
    model: str,
    *,
    pre: str = "",
    bpe_add_bos: bool = False,
    bos_disabled: bool = False,
) -> Vocab:
    """Read the token list and special ids from `metadata`, applying llama.cpp's fix-ups.

    `bpe_add_bos` is the BPE pre-tokenizer family's add-BOS default (llama3-style vocabularies add
    one); `bos_disabled` clears the family's default BOS id (chatglm). Raises ValueError with a
    one-line message for a vocabulary llama.cpp would refuse.
    """
    texts_in = metadata.get(K + "tokens")
    if not isinstance(texts_in, (list, tuple)) or not texts_in:
        raise ValueError("GGUF has no tokenizer.ggml.tokens list")
    n = len(texts_in)
    types = metadata.get(K + "token_type")
    scores_in = metadata.get(K + "scores")
    if types is not None and len(types) < n:
        raise ValueError(f"tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
    if scores_in is not None and len(scores_in) < n:
        raise ValueError(f"tokenizer.ggml.scores has {len(scores_in)} entries for {n} tokens")

    texts = list(texts_in)
    token_to_id: dict[str, int] = {}
    for i, text in enumerate(texts):
        if not text:
            # llama.cpp gives empty tokens a placeholder text so they can never match input.
            text = texts[i] = f"[EMPTY_{i}]"
        prev = token_to_id.setdefault(text, i)
        if prev != i:
            raise ValueError(f"duplicate token in vocabulary: {text!r} has ids {prev} and {i}")

    scores = [float(s) for s in scores_in[:n]] if scores_in is not None else [0.0] * n
    if types is not None:
        get = _TYPE_TO_ATTR.get
        attr = [get(int(t), ATTR_UNDEFINED) for t in types[:n]]
    else:
        attr = [ATTR_NORMAL] * n

    defaults = FAMILY_DEFAULTS[model]
    special: dict[str, int | None] = {field: None for _, field in _SPECIAL_ID_KEYS}
    special.update(bos=defaults.bos, eos=defaults.eos, unk=defaults.unk)
    if bos_disabled:
        special["bos"] = None
    for field, value in list(special.items()):
        if value is not None and value >= n:  # a family default past the end of a small vocab
            special[field] = None
    for key, field in _SPECIAL_ID_KEYS:
        value = metadata.get(K + key)
        if value is None:
            continue
        value = int(value)
        if 0 <= value < n:
            special[field] = value
        # out-of-range ids in the file are ignored in favour of the default, as llama.cpp does

    add_bos = _as_bool(metadata.get(K + "add_bos_token"), defaults.add_bos or bpe_add_bos)
    add_eos = _as_bool(metadata.get(K + "add_eos_token"), False)
    add_space_prefix = _as_bool(metadata.get(K + "add_space_prefix"), defaults.add_space_prefix)
    if add_bos and special["bos"] is None:
        raise ValueError("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set")
    if add_eos and special["eos"] is None:
        raise ValueError("tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set")

    # Recognise special tokens by text. llama.cpp walks a hash map here, so which of several
    # candidates becomes *the* EOT/FIM id is unspecified; we take the lowest id. Every candidate
    # of the EOG list below is marked control either way, so tokenization does not depend on it.
    def detect(field: str, candidates: frozenset[str]) -> None:
        if special[field] is not None:
            return
        for text in sorted(candidates & token_to_id.keys(), key=token_to_id.__getitem__):
            tid = token_to_id[text]
            special[field] = tid
            attr[tid] |= ATTR_CONTROL
            return

    detect("eot", _EOT_TEXTS)
    detect("eom", _EOM_TEXTS)
    for field, candidates in _FIM_TEXTS.items():
        detect(field, candidates)

    for tid, text in enumerate(texts):  # control tokens named "unused" are unused
        if attr[tid] & ATTR_CONTROL and "unused" in text:
            attr[tid] |= ATTR_UNUSED

    eog: set[int] = {special[f] for f in ("fim_pad", "fim_rep", "fim_sep") if special[f] is not None}
    for text in _EOG_TEXTS & token_to_id.keys():
        tid = token_to_id[text]
        eog.add(tid)
        attr[tid] |= ATTR_CONTROL
    for text in _FORCED_USER_DEFINED & token_to_id.keys():
        attr[token_to_id[text]] = ATTR_USER_DEFINED
    eog.update(special[f] for f in ("eos", "eot", "eom") if special[f] is not None)

    # Harmony-style (gpt-oss, solar-open) vocabularies end a *message* with <|end|>, not the
    # generation; gemma4 uses </s> as ordinary text. llama.cpp undoes those two marks.
    eog_texts = {texts[t] for t in eog}
    has_call = "<|call|>" in eog_texts or "<|calls|>" in eog_texts
    if "<|end|>" in eog_texts and has_call and ("<|return|>" in eog_texts or "<|flush|>" in eog_texts):
        end_id = token_to_id["<|end|>"]
        eog.discard(end_id)
        attr[end_id] = ATTR_USER_DEFINED
    if {"<|tool_response>", "</s>"} <= eog_texts:
        s_id = token_to_id["</s>"]
        eog.discard(s_id)
        attr[s_id] = ATTR_NORMAL

    matchable = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN
    cache = [tid for tid in range(n) if attr[tid] & matchable]
    # Longest first by UTF-8 length; ties keep id order (llama.cpp's sort leaves them unspecified,
    # which only matters for two equally long specials that overlap in the text).
    cache.sort(key=lambda tid: -len(texts[tid].encode("utf-8")))

    _apply_strip_attrs(metadata, pre, texts, token_to_id, attr, cache)

    return Vocab(
        model=model,
        texts=tuple(texts),
        scores=tuple(scores),
        token_attrs=tuple(attr),
        token_to_id=token_to_id,
        special_ids={k: v for k, v in special.items() if v is not None},
        add_bos=add_bos,
        add_eos=add_eos,
        add_space_prefix=add_space_prefix,
        eog_ids=frozenset(eog),
        special_cache=tuple(cache),
    )


def _apply_strip_attrs(
    metadata: Mapping[str, Any],
    pre: str,
    texts: Sequence[str],
    token_to_id: Mapping[str, int],
    attr: list[int],
    cache: Sequence[int],
) -> None:
    """Whitespace-stripping attributes that llama.cpp sets by model name (not stored in GGUF)."""
    name = str(metadata.get("general.name", "")).lower()
    arch = str(metadata.get("general.architecture", ""))

    def set_attr(text: str, bit: int, on: bool) -> None:
        tid = token_to_id.get(text)
        if tid is not None:
            attr[tid] = (attr[tid] | bit) if on else (attr[tid] & ~bit)

    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        set_attr("<mask>", ATTR_LSTRIP, True)
    elif "phi-3" in name or "phi3" in name:
        # Phi-3's template puts a newline after each special token that its tokenizer swallows.
        for tid in cache:
            attr[tid] |= ATTR_RSTRIP
        set_attr("</s>", ATTR_RSTRIP, True)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            set_attr(text, ATTR_RSTRIP, False)
    elif "modern-bert" in name:
        set_attr("[MASK]", ATTR_LSTRIP, True)
