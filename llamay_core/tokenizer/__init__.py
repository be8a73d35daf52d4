"""Tokenizers built from GGUF `tokenizer.ggml.*` metadata that tokenize exactly like llama.cpp.

    from llamay_core.tokenizer import Tokenizer, IncrementalDecoder
    tok = Tokenizer.from_metadata(open_gguf(path).metadata)
    ids = tok.encode("Hello", add_special=True, parse_special=False)
    text = tok.decode(ids)

Modules: `vocab` (token list, attributes, special ids), `pretokenize` (regexes by
tokenizer.ggml.pre), `bpe` (byte-level BPE), `spm` (SentencePiece-style), `special` (special-token
partitioning), `tokenizer` (the `Tokenizer` facade), `streaming` (`IncrementalDecoder`).
"""
from llamay_core.tokenizer.streaming import IncrementalDecoder
from llamay_core.tokenizer.tokenizer import Tokenizer
from llamay_core.tokenizer.vocab import Vocab

__all__ = ["IncrementalDecoder", "Tokenizer", "Vocab"]
