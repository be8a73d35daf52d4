"""The tokenizer on real GGUF vocabularies against llama.cpp's outputs (goldens) and known ids."""
from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamay_core.tokenizer import IncrementalDecoder, Tokenizer
from llamay_core.tokenizer.bpe import BYTE_TO_CHAR

GOLDENS = Path(__file__).resolve().parents[2] / ".." / "shared" / "goldens"
MODELS = {"smollm2": "smollm2-135m", "qwen": "qwen2.5-coder-0.5b", "gemma3": "gemma3-270m"}

pytestmark = pytest.mark.model


def model_path(name: str) -> Path:
    home = Path(os.environ.get("LLAMAY_HOME", "~/.cache/llamay")).expanduser()
    return home / "models" / f"{name}.gguf"


@functools.lru_cache(maxsize=None)
def _metadata(key: str) -> dict:
    from llamay_core.files.gguf_file import open_gguf

    return dict(open_gguf(model_path(MODELS[key])).metadata)


@functools.lru_cache(maxsize=None)
def _tokenizer(key: str) -> Tokenizer:
    return Tokenizer.from_metadata(_metadata(key))


@functools.lru_cache(maxsize=None)
def _reference(key: str):
    """The same BPE on the plain-Python engine (an independent check of the Rust fast path)."""
    return _tokenizer(key)._encoder.reference()


@functools.lru_cache(maxsize=None)
def _missing_bytes(key: str) -> frozenset[int]:
    tok = _tokenizer(key)
    return frozenset(b for b in range(256) if tok.token_to_id(BYTE_TO_CHAR[b]) is None)


def tokenizer_for(key: str) -> Tokenizer:
    """The model's tokenizer (built once per session), or a skip if the model is not pulled."""
    if not model_path(MODELS[key]).exists():
        pytest.skip(f"{MODELS[key]}.gguf not found under $LLAMAY_HOME/models")
    return _tokenizer(key)


def _read(filename: str) -> list[dict]:
    path = GOLDENS / filename
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _cases(kind: str) -> list:
    cases = []
    for key in ("smollm2", "qwen"):
        filename = f"tokenize-{key}.jsonl" if kind == "tokenize" else f"{key}.jsonl"
        for line in _read(filename):
            cases.append(pytest.param(key, line, id=f"{key}:{line['id']}"))
    if not cases:  # keep a visible skip rather than an empty parameter set
        cases.append(pytest.param(None, None, id="goldens-absent",
                                  marks=pytest.mark.skip(reason=f"no goldens under {GOLDENS}")))
    return cases


# --------------------------------------------------------------------------- goldens

@pytest.mark.parametrize("key,line", _cases("tokenize"))
def test_tokenize_golden(key, line):
    tok = tokenizer_for(key)
    assert tok.encode(line["text"], add_special=line["add_special"], parse_special=line["parse_special"]) == line["ids"]


@pytest.mark.parametrize("key,line", _cases("generate"))
def test_prompt_golden(key, line):
    tok = tokenizer_for(key)
    assert tok.encode(line["prompt"], add_special=True, parse_special=True) == line["prompt_ids"]


@pytest.mark.parametrize("key,line", _cases("generate"))
def test_decode_golden(key, line):
    tok = tokenizer_for(key)
    assert tok.decode(line["gen_ids"]) == line["continuation_text"]
    dec = IncrementalDecoder(tok)
    assert "".join(dec.push(t) for t in line["gen_ids"]) + dec.flush() == line["continuation_text"]


@pytest.mark.parametrize("key", ["smollm2", "qwen"])
def test_fast_bpe_matches_python_reference_on_goldens(key):
    tok = tokenizer_for(key)
    texts = [g["text"] for g in _read(f"tokenize-{key}.jsonl")] + [g["prompt"] for g in _read(f"{key}.jsonl")]
    texts.append(Path(__file__).read_text(encoding="utf-8"))
    ref = _reference(key)
    for text in texts:
        assert tok._encoder.encode(text) == ref.encode(text), text


_TRICKY = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(" \n\t\r'sdmtlvre0123456789.,;!?-_()<>|~$+ÆéßЖΩ北京한👍🏽\u200d\u0301\xa0\u3000\x85")),
        st.characters(blacklist_categories=("Cs",)),
    ),
    max_size=60,
)


@pytest.mark.parametrize("key", ["smollm2", "qwen"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TRICKY)
def test_real_bpe_round_trip_and_reference(key, text):
    tok = tokenizer_for(key)
    ids = tok.encode(text, add_special=False)
    # SmolLM2's vocabulary lacks a few byte tokens (e.g. 0xF1, the lead byte of planes 4-7);
    # llama.cpp drops such bytes too, so only text without them survives the round trip.
    if not set(text.encode("utf-8")) & _missing_bytes(key):
        assert tok.decode(ids) == text
    assert ids == _reference(key).encode(text)


@pytest.mark.parametrize("key", ["smollm2", "qwen"])
def test_eog_ids(key):
    tok = tokenizer_for(key)
    for text in ("<|endoftext|>", "<|im_end|>"):
        assert tok.token_to_id(text) in tok.eog_ids
    assert tok.eos_id in tok.eog_ids
    assert tok.is_control(tok.token_to_id("<|im_start|>"))
    assert tok.token_to_id("<|im_start|>") not in tok.eog_ids


def test_qwen_build_and_encode_speed():
    tok = tokenizer_for("qwen")
    md = _metadata("qwen")
    start = time.perf_counter()
    Tokenizer.from_metadata(md)
    build = time.perf_counter() - start
    text = Path(__file__).read_text(encoding="utf-8") * 4
    ids = tok.encode(text)
    assert len(ids) > 2048
    start = time.perf_counter()
    tok.encode(text)
    encode = time.perf_counter() - start
    # Targets: build < 1.5 s, a 2048-token prompt well under 100 ms (generous for shared CI).
    assert build < 1.5, build
    assert encode < 0.1, encode


# --------------------------------------------------------------------------- gemma3 (SentencePiece)

def test_gemma3_hello_world():
    tok = tokenizer_for("gemma3")
    assert tok.model == "llama" and tok.add_bos and tok.bos_id == 2
    # "Hello" (9259) has no space before it: gemma's add_space_prefix is false; "▁world" is 1902.
    assert [tok.token_text(i) for i in (9259, 1902)] == ["Hello", "▁world"]
    assert tok.encode("Hello world") == [2, 9259, 1902]
    assert tok.encode("Hello world", add_special=False) == [9259, 1902]
    assert tok.encode(" Hello world", add_special=False) == [tok.token_to_id("▁Hello"), 1902]
    assert tok.decode([2, 9259, 1902], skip_special=True) == "Hello world"
    assert tok.decode([2, 9259, 1902]) == "<bos>Hello world"


def test_gemma3_chat_specials():
    tok = tokenizer_for("gemma3")
    sot, eot, nl = (tok.token_to_id(t) for t in ("<start_of_turn>", "<end_of_turn>", "\n"))
    text = "<start_of_turn>user\nHi<end_of_turn>\n"
    ids = tok.encode(text, parse_special=True)
    assert ids == [2, sot, tok.token_to_id("user"), nl, tok.token_to_id("Hi"), eot, nl]
    plain = tok.encode(text, parse_special=False)
    assert sot not in plain and eot not in plain and nl in plain  # "\n" is user-defined: always split
    assert tok.decode(plain, skip_special=True) == text
    assert eot in tok.eog_ids and tok.eos_id in tok.eog_ids


def test_gemma3_whitespace_tokens_and_byte_fallback():
    tok = tokenizer_for("gemma3")
    # Runs of spaces, tabs and newlines are user-defined tokens, cut out before SentencePiece.
    ids = tok.encode("a  b\n\nc\t\td", add_special=False)
    assert [tok.token_text(i) for i in ids] == ["a", "  ", "b", "\n\n", "c", "\t\t", "d"]
    # A character missing from the vocabulary is spelled as <0xNN> byte tokens.
    ids = tok.encode("x\U000F0000y", add_special=False)
    assert [tok.token_text(i) for i in ids] == ["x", "<0xF3>", "<0xB0>", "<0x80>", "<0x80>", "y"]
    assert tok.decode(ids) == "x\U000F0000y"
    dec = IncrementalDecoder(tok)
    assert [dec.push(i) for i in ids] == ["x", "", "", "", "\U000F0000", "y"]


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="▁", blacklist_categories=("Cs",)), max_size=60))
def test_gemma3_round_trip(text):
    tok = tokenizer_for("gemma3")
    assert tok.decode(tok.encode(text, add_special=False)) == text
    assert tok.decode(tok.encode(text), skip_special=True) == text
