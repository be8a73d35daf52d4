"""Tokenizer unit tests on small synthetic vocabularies (no model files needed)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamay_core.tokenizer import IncrementalDecoder, Tokenizer
from llamay_core.tokenizer.bpe import BYTE_TO_CHAR, PyBpe, bytes_to_symbols, parse_merges
from llamay_core.tokenizer.pretokenize import PRE_TOKENIZERS, pretokenizer_spec
from llamay_core.tokenizer.special import SpecialMatcher
from llamay_core.tokenizer.vocab import ATTR_CONTROL, ATTR_USER_DEFINED

# --------------------------------------------------------------------------- synthetic vocabularies

BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BPE_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "l l", "o r", "Ġ w", "Ġw or", "Ġwor l",
              "Ġworl d", "H e", "He ll", "Hell o", "Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ", "1 2", "' s", "Ã ©"]


def bpe_metadata(pre: str = "qwen2", merges: tuple[str, ...] = (), drop_bytes: tuple[int, ...] = (),
                 **overrides) -> dict:
    """A byte-level BPE vocabulary: 3 control tokens, the 256 byte characters (less `drop_bytes`),
    the merges' results, a user-defined token and a `</s>` token that llama.cpp promotes to
    control by its text."""
    merges = list(BPE_MERGES) + list(merges)
    tokens = list(BPE_SPECIALS) + [ch for b, ch in enumerate(BYTE_TO_CHAR) if b not in drop_bytes]
    for a, b in parse_merges(merges):
        if a + b not in tokens:
            tokens.append(a + b)
    tokens += ["<tool_call>", "</s>"]
    types = [3] * len(BPE_SPECIALS) + [1] * (len(tokens) - len(BPE_SPECIALS) - 2) + [4, 1]
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
    }
    md.update(overrides)
    return md


def spm_metadata(**overrides) -> dict:
    """A SentencePiece-style vocabulary whose scores make the merge order easy to follow."""
    scored = {"▁H": -5.0, "He": -3.0, "ll": -1.0, "llo": -2.0, "Hello": -4.0, "▁Hello": -6.0,
              "▁w": -2.0, "or": -1.5, "ld": -2.5, "▁wor": -3.0, "▁world": -3.5, "wor": -10.0}
    tokens = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"]
    types = [2, 3, 3, 3, 3]
    scores = [0.0] * 5
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
        scores.append(0.0)
    for ch in ["▁", "H", "e", "l", "o", "w", "r", "d"]:
        tokens.append(ch)
        types.append(1)
        scores.append(-20.0)
    for text, score in scored.items():
        tokens.append(text)
        types.append(1)
        scores.append(score)
    tokens.append("\n")
    types.append(4)
    scores.append(0.0)
    md = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    md.update(overrides)
    return md


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return Tokenizer.from_metadata(bpe_metadata())


@pytest.fixture(scope="module")
def spm() -> Tokenizer:
    return Tokenizer.from_metadata(spm_metadata())


def ids_of(tok: Tokenizer, *texts: str) -> list[int]:
    return [tok.token_to_id(t) for t in texts]


# One tokenizer per distinct pre-tokenizer spec, built once for the whole module.
_FAMILY_NAMES = sorted({spec.family: name for name, spec in PRE_TOKENIZERS.items()}.values())
_BY_PRE: dict[str, Tokenizer] = {}


def tok_for(pre: str) -> Tokenizer:
    if pre not in _BY_PRE:
        _BY_PRE[pre] = Tokenizer.from_metadata(bpe_metadata(pre))
    return _BY_PRE[pre]


# --------------------------------------------------------------------------- BPE

def test_bpe_merges_by_rank(bpe):
    assert bpe.encode("Hello world") == ids_of(bpe, "Hello", "Ġworld")
    assert bpe.encode(" the") == ids_of(bpe, "Ġthe")
    # qwen2 pre-tokenizes digits one by one, so "12" never meets its merge.
    assert bpe.encode("12") == ids_of(bpe, "1", "2")
    assert tok_for("gpt-2").encode("12") == ids_of(bpe, "12")


def test_bpe_encodes_bytes_of_rare_characters(bpe):
    # 'é' is two bytes; the merge "Ã ©" makes it one token, '€' stays three byte tokens.
    assert bpe.encode("é") == ids_of(bpe, "Ã©")
    assert bpe.encode("€") == ids_of(bpe, *bytes_to_symbols("€".encode()))


def test_bpe_no_bos_unless_asked(bpe):
    assert bpe.encode("") == []
    assert bpe.add_bos is False
    with_bos = Tokenizer.from_metadata(bpe_metadata(**{"tokenizer.ggml.add_bos_token": True}))
    assert with_bos.encode("the") == [0] + bpe.encode("the")
    assert with_bos.encode("the", add_special=False) == bpe.encode("the")
    assert with_bos.encode("") == [0]


def test_llama3_family_adds_bos_by_default():
    md = bpe_metadata("llama-bpe")
    del md["tokenizer.ggml.add_bos_token"]
    tok = Tokenizer.from_metadata(md)
    assert tok.add_bos and tok.encode("a")[0] == tok.bos_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_bpe_round_trip(text):
    tok = tok_for("qwen2")
    assert tok.decode(tok.encode(text, add_special=False)) == text
    assert tok.decode(tok.encode(text, add_special=False, parse_special=True)) == text


@pytest.mark.parametrize("pre", _FAMILY_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_every_pre_tokenizer_keeps_every_byte(pre, text):
    """Whatever the regexes, the pieces concatenate back to the input."""
    tok = tok_for(pre)
    ids = tok.encode(text, add_special=False)
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")


_MIXED = st.text(alphabet=st.sampled_from(list("abHeloTthinrwd12 \n\t'.!?,é€😀ЖΩ北") + ["\u0301", "\xa0", "\u3000"]),
                 max_size=80)


@pytest.mark.parametrize("pre", ["qwen2", "smollm", "llama-bpe", "gpt-2", "default", "deepseek-v3", "tekken"])
@settings(max_examples=60, deadline=None)
@given(text=_MIXED)
def test_fast_bpe_matches_python_reference(pre, text):
    """The Rust BPE path and the plain-Python transcription of llama.cpp agree."""
    tok = tok_for(pre)
    enc = tok._encoder
    assert enc.is_fast
    assert enc.encode(text) == enc.reference().encode(text)


def test_python_bpe_merge_order():
    t2i = {c: i for i, c in enumerate("abcd")}
    t2i.update({"ab": 4, "bc": 5, "abc": 6})
    # "b c" outranks "a b": "abc" -> a + bc, which has no merge.
    bpe = PyBpe(t2i, [("b", "c"), ("a", "b"), ("ab", "c")])
    assert bpe.word_ids("abc") == (0, 5)
    bpe = PyBpe(t2i, [("a", "b"), ("b", "c"), ("ab", "c")])
    assert bpe.word_ids("abc") == (6,)
    # Equal pairs merge leftmost first.
    t2i2 = {"a": 0, "aa": 1}
    assert PyBpe(t2i2, [("a", "a")]).word_ids("aaa") == (1, 0)


def test_python_bpe_spells_out_merges_that_are_not_tokens():
    t2i = {"a": 0, "b": 1}
    assert PyBpe(t2i, [("a", "b")]).word_ids("ab") == (0, 1)


def test_byte_missing_from_vocab_blocks_merges_across_it():
    # llama.cpp keeps an unknown byte as a symbol (so "!!" and "!!" never meet) and drops it
    # from the output; the fast path must not join its neighbours.
    tok = Tokenizer.from_metadata(bpe_metadata("gpt-2", merges=("! !", "!! !!"), drop_bytes=(0x04,)))
    assert tok._encoder.is_fast
    bang2, bang4 = ids_of(tok, "!!", "!!!!")
    assert tok.encode("!!!!") == [bang4]
    assert tok.encode("!!\x04!!") == [bang2, bang2] == tok._encoder.reference().encode("!!\x04!!")
    assert tok.decode(tok.encode("a\x04b")) == "ab"


def test_vocab_without_merge_results_uses_python_engine():
    md = bpe_metadata()
    md["tokenizer.ggml.merges"] = md["tokenizer.ggml.merges"] + ["x y"]  # "xy" is not a token
    tok = Tokenizer.from_metadata(md)
    assert not tok._encoder.is_fast
    assert tok.encode("Hello xy") == ids_of(tok, "Hello", "Ġ", "x", "y")


# --------------------------------------------------------------------------- special tokens

def test_control_tokens_parsed_only_when_asked(bpe):
    im_start = bpe.token_to_id("<|im_start|>")
    assert bpe.encode("<|im_start|>user", parse_special=True)[0] == im_start
    plain = bpe.encode("<|im_start|>user", parse_special=False)
    assert im_start not in plain
    assert bpe.decode(plain) == "<|im_start|>user"


def test_user_defined_tokens_always_parsed(bpe):
    tool = bpe.token_to_id("<tool_call>")
    assert bpe.encode("a<tool_call>b", parse_special=False) == [bpe.token_to_id("a"), tool, bpe.token_to_id("b")]
    assert bpe.encode("a<tool_call>b", parse_special=True) == [bpe.token_to_id("a"), tool, bpe.token_to_id("b")]


def test_eog_by_text_and_promotion_to_control(bpe):
    s = bpe.token_to_id("</s>")
    assert bpe.is_control(s)  # normal in the file, control because llama.cpp knows "</s>"
    assert bpe.encode("</s>", parse_special=True) == [s]
    assert bpe.eog_ids == {bpe.token_to_id("<|endoftext|>"), bpe.token_to_id("<|im_end|>"), s, 2}
    assert bpe.eos_id == 2 and bpe.is_eog(2)


def test_special_partition_is_longest_first_globally():
    # llama.cpp cuts out the longest special everywhere before trying shorter ones, so a short
    # token that starts earlier loses to a longer one overlapping it.
    texts = ["xA", "ABCD", "A"]
    attrs = [ATTR_CONTROL] * 3
    m = SpecialMatcher(texts, attrs, [1, 0, 2])
    assert m.partition("xABCD", True) == ["x", 1]
    assert m.partition("xAB", True) == [0, "B"]
    assert m.partition("AxA", True) == [2, 0]
    assert m.partition("xABCD", False) == ["xABCD"]
    m2 = SpecialMatcher(texts, [ATTR_USER_DEFINED] * 3, [1, 0, 2])
    assert m2.partition("A ABCD", False) == [2, " ", 1]


def test_phi3_special_tokens_strip_following_whitespace():
    md = bpe_metadata(**{"general.name": "Phi-3 mini"})
    tok = Tokenizer.from_metadata(md)
    end = tok.token_to_id("<|im_end|>")
    assert tok.encode("a<|im_end|>\n b", parse_special=True) == [tok.token_to_id("a"), end, tok.token_to_id("b")]


# --------------------------------------------------------------------------- decoding

def test_decode_renders_or_skips_control_tokens(bpe):
    ids = bpe.encode("<|im_start|>Hello<|im_end|>", parse_special=True)
    assert bpe.decode(ids) == "<|im_start|>Hello<|im_end|>"
    assert bpe.decode(ids, skip_special=True) == "Hello"
    assert bpe.token_bytes(bpe.token_to_id("Ġworld")) == b" world"


def test_clean_spaces_only_for_families_that_enable_it():
    gpt2 = tok_for("gpt-2")
    ids = gpt2.encode("Hi . you 's , ok ' x")
    assert gpt2.decode(ids) == "Hi. you's, ok'x"
    qwen = tok_for("qwen2")
    assert qwen.decode(qwen.encode("Hi . you 's")) == "Hi . you 's"


def test_unused_tokens_render_empty():
    md = bpe_metadata()
    md["tokenizer.ggml.token_type"] = list(md["tokenizer.ggml.token_type"])
    md["tokenizer.ggml.token_type"][-1] = 5  # "</s>" unused
    tok = Tokenizer.from_metadata(md)
    # Still promoted to control (and EOG) by its text, so it renders as its text.
    assert tok.decode([tok.token_to_id("</s>")]) == "</s>"
    md["tokenizer.ggml.token_type"][-2] = 5  # "<tool_call>" unused
    tok = Tokenizer.from_metadata(md)
    assert tok.decode([tok.token_to_id("<tool_call>")]) == ""


def test_out_of_range_id_is_a_value_error(bpe):
    with pytest.raises(ValueError):
        bpe.decode([bpe.n_vocab])
    with pytest.raises(ValueError):
        bpe.token_bytes(-1)


def test_incremental_decoder_holds_split_characters(bpe):
    ids = bpe.encode("a€😀b")
    dec = IncrementalDecoder(bpe)
    outs = [dec.push(i) for i in ids]
    assert "".join(outs) + dec.flush() == "a€😀b"
    # '€' arrives as three byte tokens: nothing until the last one.
    euro = ids_of(bpe, *bytes_to_symbols("€".encode()))
    dec = IncrementalDecoder(bpe)
    assert [dec.push(i) for i in euro] == ["", "", "€"]
    assert not dec.pending


def test_incremental_decoder_flushes_incomplete_and_replaces_invalid(bpe):
    dec = IncrementalDecoder(bpe)
    first_two = ids_of(bpe, *bytes_to_symbols("€".encode()))[:2]
    assert dec.push_many(first_two) == ""
    assert dec.pending
    assert dec.flush() == "\ufffd"
    lone = bpe.token_to_id(bytes_to_symbols(b"\x80"))
    assert dec.push(lone) == "\ufffd"


def test_incremental_decoder_skip_special(bpe):
    ids = bpe.encode("<|im_start|>hi", parse_special=True)
    assert IncrementalDecoder(bpe, skip_special=True).push_many(ids) == "hi"
    assert IncrementalDecoder(bpe).push_many(ids) == "<|im_start|>hi"


@settings(max_examples=100, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=7))
def test_incremental_decoder_equals_decode(text, step):
    tok = tok_for("qwen2")
    ids = tok.encode(text, add_special=False)
    dec = IncrementalDecoder(tok)
    out = "".join(dec.push_many(ids[i:i + step]) for i in range(0, len(ids), step)) + dec.flush()
    assert out == tok.decode(ids) == text


# --------------------------------------------------------------------------- SentencePiece

def test_spm_merges_by_score_with_space_prefix(spm):
    assert spm.add_bos and spm.bos_id == 1
    assert spm.encode("Hello world") == [1] + ids_of(spm, "▁Hello", "▁world")
    assert spm.encode("Hello world", add_special=False) == ids_of(spm, "▁Hello", "▁world")
    no_prefix = Tokenizer.from_metadata(spm_metadata(**{"tokenizer.ggml.add_space_prefix": False}))
    assert no_prefix.encode("Hello world", add_special=False) == ids_of(spm, "Hello", "▁world")


def test_spm_byte_fallback(spm):
    ids = spm.encode("Hé", add_special=False)
    assert ids == ids_of(spm, "▁H", "<0xC3>", "<0xA9>")
    assert spm.decode(ids) == "Hé"


def test_spm_specials_and_space_prefix_after_them(spm):
    sot, eot = ids_of(spm, "<start_of_turn>", "<end_of_turn>")
    ids = spm.encode("<start_of_turn>Hello<end_of_turn>\nworld", parse_special=True)
    nl = spm.token_to_id("\n")
    assert ids == [1, sot, spm.token_to_id("▁Hello"), eot, nl, spm.token_to_id("▁world")]
    assert spm.encode("<start_of_turn>", parse_special=False)[1] != sot
    # The space prefix is dropped from the first piece only, and (as in llama.cpp) not when a
    # skipped BOS or an empty control piece comes first.
    assert spm.decode(ids, skip_special=True) == " Hello\n world"
    assert spm.decode(ids[1:], skip_special=True) == " Hello\n world"
    assert spm.decode(ids[2:], skip_special=True) == "Hello\n world"
    assert spm.decode(ids) == "<s><start_of_turn> Hello<end_of_turn>\n world"
    assert spm.eog_ids == {2, eot}


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="▁", blacklist_categories=("Cs",))))
def test_spm_round_trip(text):
    tok = Tokenizer.from_metadata(spm_metadata(**{"tokenizer.ggml.add_space_prefix": False}))
    assert tok.decode(tok.encode(text, add_special=False)) == text


def test_spm_empty_text_is_just_bos(spm):
    assert spm.encode("") == [1]
    assert spm.encode("", add_special=False) == []


# --------------------------------------------------------------------------- errors

def test_unsupported_tokenizer_model():
    with pytest.raises(ValueError, match="tokenizer.ggml.model 'bert'"):
        Tokenizer.from_metadata(bpe_metadata(**{"tokenizer.ggml.model": "bert"}))


def test_unsupported_pre_tokenizer():
    with pytest.raises(ValueError, match="tokenizer.ggml.pre 'no-such-pre'"):
        Tokenizer.from_metadata(bpe_metadata("no-such-pre"))
    assert pretokenizer_spec(None).family == "default"


def test_duplicate_tokens_rejected():
    md = bpe_metadata()
    md["tokenizer.ggml.tokens"] = list(md["tokenizer.ggml.tokens"])
    md["tokenizer.ggml.tokens"][-1] = "a"
    with pytest.raises(ValueError, match="duplicate token"):
        Tokenizer.from_metadata(md)


def test_missing_merges_rejected():
    md = bpe_metadata()
    del md["tokenizer.ggml.merges"]
    with pytest.raises(ValueError, match="merges"):
        Tokenizer.from_metadata(md)


def test_add_bos_without_bos_id_rejected():
    md = spm_metadata()
    md["tokenizer.ggml.tokens"] = md["tokenizer.ggml.tokens"][:1]
    md["tokenizer.ggml.token_type"] = [2]
    md["tokenizer.ggml.scores"] = [0.0]
    del md["tokenizer.ggml.bos_token_id"]
    with pytest.raises(ValueError, match="add_bos_token"):
        Tokenizer.from_metadata(md)
