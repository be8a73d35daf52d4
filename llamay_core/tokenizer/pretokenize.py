"""Pre-tokenizer regexes chosen by `tokenizer.ggml.pre`, applied the way llama.cpp applies them.

A BPE vocabulary first splits text into words with a list of regexes. llama.cpp applies the list in
order: each regex splits every piece left by the previous one into its matches *and* the gaps
between them (a gap is a piece too). `tokenizers.pre_tokenizers.Split(..., "isolated")` has exactly
that behaviour and its Oniguruma engine knows `\\p{L}`-style classes, so the regexes run there.

The regex strings are llama.cpp's (its adaptations of each model's tokenizer.json). Where
llama.cpp's own regex engine deviates from Unicode semantics we rewrite the pattern so Oniguruma
deviates the same way (see `onig_pattern`). The other llama.cpp load-time switches that come
with a pre-tokenizer name (ignore_merges, clean_spaces, add_bos) live in the same table.
"""
from __future__ import annotations

import attrs
from tokenizers import Regex, pre_tokenizers

# Case-insensitive English contractions, spelled out because llama.cpp's engine has no (?i:).
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

# GPT-2. llama.cpp lists it without the final `|\s+`, but its hand-written matcher for this exact
# pattern behaves as if it were there (a lone whitespace before a word is a piece of its own).
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# Upper/lower-case letter runs, written with lookaheads because llama.cpp's engine cannot tell
# letter cases apart beyond ASCII: "(?=\p{L})[^a-z]" is "a letter that is not ASCII lowercase".
_UPPER_RUN = r"((?=[\p{L}])([^a-z]))"
_LOWER_RUN = r"((?=[\p{L}])([^A-Z]))"
TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER_RUN + "*" + _LOWER_RUN + "+"
          r"|[^\r\n\p{L}\p{N}]?" + _UPPER_RUN + "+" + _LOWER_RUN + "*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER_RUN + "*" + _LOWER_RUN + "+" + _CONTRACTIONS + "?"
         r"|[^\r\n\p{L}\p{N}]?" + _UPPER_RUN + "+" + _LOWER_RUN + "*" + _CONTRACTIONS + "?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK3_WORDS = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"""
                   r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# CJK runs: U+4E00-9FA5, U+0800-4E00 and Hangul U+AC00-D7FF (deepseek-coder); U+4E00-9FA5 and
# the kana blocks (deepseek-v3).
CJK_CODER = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
# Split before spaces and sentence punctuation, including the CJK, Devanagari and Arabic marks.
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"


@attrs.frozen
class PreTokenizerSpec:
    """How llama.cpp pre-tokenizes and post-processes for one `tokenizer.ggml.pre` family."""

    family: str
    regexes: tuple[str, ...]
    ignore_merges: bool = False   # a whole word found in the vocabulary is one token, unmerged
    clean_spaces: bool = True     # detokenize drops spaces before ".,!?" and some contractions
    add_bos: bool = False         # add-BOS default, before tokenizer.ggml.add_bos_token
    bos_disabled: bool = False    # no default BOS id


def _family(family: str, regexes: tuple[str, ...], names: tuple[str, ...], **flags: bool) -> dict:
    spec = PreTokenizerSpec(family=family, regexes=regexes, **flags)
    return {name: spec for name in names}


_STARCODER = (r"\p{N}", GPT2)

# `tokenizer.ggml.pre` value -> spec. Names and switches follow llama.cpp's llama-vocab.cpp.
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    **_family("default", (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"), ("default",)),
    **_family("llama3", (LLAMA3,), ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                    "midm-2.0", "lfm2", "jina-v5-nano"),
              ignore_merges=True, add_bos=True),
    **_family("dbrx", (LLAMA3,), ("dbrx", "smaug-bpe")),
    **_family("chatglm4", (LLAMA3,), ("chatglm-bpe", "glm4"), bos_disabled=True),
    **_family("gpt2", (GPT2,), ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                                "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code",
                                "roberta-bpe", "mpt", "olmo", "jais", "exaone4")),
    **_family("gpt2", (GPT2,), ("trillion", "granite-docling"), clean_spaces=False),
    **_family("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"), ("falcon",)),
    **_family("starcoder", _STARCODER, ("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2")),
    **_family("starcoder", _STARCODER, ("smollm", "command-r"), clean_spaces=False),
    **_family("qwen2", (QWEN2,), ("stablelm2", "megrez")),
    **_family("qwen2", (QWEN2,), ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open",
                                  "grok-2"), clean_spaces=False),
    **_family("qwen35", (QWEN35,), ("qwen35",), clean_spaces=False),
    **_family("deepseek-coder", (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_CODER, r"\p{N}"),
              ("deepseek-coder",), clean_spaces=False),
    **_family("deepseek-v3", (r"\p{N}{1,3}", CJK_KANA, DEEPSEEK3_WORDS),
              ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), clean_spaces=False),
    **_family("tekken", (TEKKEN,), ("tekken",), clean_spaces=False, ignore_merges=True, add_bos=True),
    **_family("gpt-4o", (GPT4O,), ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), clean_spaces=False),
    **_family("bloom", (BLOOM,), ("bloom", "gpt3-finnish")),
    **_family("bloom", (BLOOM,), ("poro-chat",), clean_spaces=False),
    **_family("viking", (BLOOM, r"\p{N}"), ("viking",), clean_spaces=False),
    **_family("seed-coder", (SEED_CODER,), ("seed-coder",), clean_spaces=False),
    **_family("bailingmoe", (BAILINGMOE,), ("bailingmoe", "bailingmoe2", "llada-moe"), clean_spaces=False),
    **_family("minicpm5", (r"\p{N}{1,3}", MINICPM5), ("minicpm5",), ignore_merges=True),
    **_family("ufakzeka", (UFAKZEKA,), ("ufakzeka",), clean_spaces=False),
    **_family("laguna", (r"[^\n]+|[\n]+", QWEN2), ("laguna",), clean_spaces=False),
    **_family("chameleon", (r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                            r"([\t\n]|    |  )", r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2),
              ("chameleon",), clean_spaces=False, add_bos=True),
}


def pretokenizer_spec(pre: str | None) -> PreTokenizerSpec:
    """The spec for a `tokenizer.ggml.pre` value; a missing value means "default", as in llama.cpp.

    Raises ValueError naming the value when llamay does not know it.
    """
    name = pre or "default"
    spec = PRE_TOKENIZERS.get(name)
    if spec is None:
        raise ValueError(f"unsupported tokenizer.ggml.pre {name!r} "
                         f"(llamay knows {len(PRE_TOKENIZERS)}, e.g. qwen2, llama-bpe, smollm, gpt-2, default)")
    return spec


def onig_pattern(regex: str) -> str:
    """Rewrite a llama.cpp pre-tokenizer regex so that Oniguruma matches what llama.cpp matches.

    llama.cpp runs non-ASCII text through its regex engine as one placeholder byte per Unicode
    category, with `\\p{S}` meaning non-ASCII symbols plus ``$+<=>^`|`` (it leaves out '~'), and
    every `\\p{Lu}`-style letter subclass meaning any letter.
    """
    for sub in ("Lu", "Ll", "Lt", "Lm", "Lo"):
        regex = regex.replace(r"\p{" + sub + "}", r"\p{L}")
    return regex.replace(r"\p{S}", r"[\p{S}&&[^~]]")


def build_splitter(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    """A `tokenizers` pre-tokenizer that splits text into words as llama.cpp's regex list does."""
    splits = [pre_tokenizers.Split(Regex(onig_pattern(r)), behavior="isolated") for r in spec.regexes]
    return splits[0] if len(splits) == 1 else pre_tokenizers.Sequence(splits)
