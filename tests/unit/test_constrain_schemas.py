"""Constrained output: 20 varied JSON Schemas, GBNF grammars, regexes and response_format.

The schema tests drive each Constraint with seeded random logits biased towards closing quotes
and brackets (so strings and arrays end) over real tokenizers: whatever is sampled inside the
mask must parse and validate. Generation through the model is tested on the tiny model.
"""
from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

import llamay
from llamay_core.constrain.engines import compile_grammar
from llamay_core.constrain.mask import apply_mask
from llamay_core.constrain.sources import constraint_from_response_format, read_json_schema
from llamay_core.engine.sampling import Sampler, SamplingParams
from llamay_core.errors import UsageError

OBJ = "object"
SCHEMAS = [
    {"type": OBJ, "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]},
    {"type": OBJ, "properties": {"ok": {"type": "boolean"}, "none": {"type": "null"}}, "required": ["ok", "none"]},
    {"type": OBJ, "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": OBJ, "properties": {"tags": {"type": "array", "items": {"type": "string"}}}, "required": ["tags"]},
    {"type": OBJ, "properties": {"xs": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}},
     "required": ["xs"]},
    {"type": OBJ, "properties": {"price": {"type": "number"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
     "required": ["price", "qty"]},
    {"type": OBJ, "properties": {"user": {"type": OBJ, "properties": {
        "id": {"type": "integer"}, "address": {"type": OBJ, "properties": {
            "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"], "additionalProperties": False}},
        "required": ["id", "address"], "additionalProperties": False}}, "required": ["user"], "additionalProperties": False},
    {"type": OBJ, "properties": {"quote": {"enum": ["say \"hi\"", "back\\slash", "tab\there", "new\nline"]}},
     "required": ["quote"]},
    {"type": OBJ, "properties": {"text": {"const": "a \"quoted\" \\ path\u00e9"}}, "required": ["text"]},
    {"type": OBJ, "properties": {"code": {"type": "string", "minLength": 2, "maxLength": 6}}, "required": ["code"]},
    {"type": OBJ, "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}]}}, "required": ["v"]},
    {"$defs": {"pt": {"type": OBJ, "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
     "type": OBJ, "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}}, "required": ["a", "b"]},
    {"type": "array", "items": {"type": OBJ, "properties": {"k": {"type": "string"}, "n": {"type": "integer"}},
                                "required": ["k", "n"]}, "minItems": 1, "maxItems": 3},
    {"type": OBJ, "properties": {"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"},
                                                                     "maxItems": 3}, "maxItems": 3}}, "required": ["matrix"]},
    {"type": OBJ, "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}, "required": ["id"],
     "additionalProperties": False},
    {"type": OBJ, "properties": {"status": {"type": "string", "enum": ["open", "closed"]},
                                 "priority": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["status", "priority"]},
    {"type": OBJ, "properties": {"temp": {"type": "number", "minimum": -50, "maximum": 60}}, "required": ["temp"]},
    {"type": OBJ, "properties": {"items": {"type": "array", "items": {"type": OBJ, "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
        "required": ["sku", "qty", "price"], "additionalProperties": False}}}, "required": ["items"]},
    {"type": OBJ, "properties": {"meta": {"type": OBJ, "additionalProperties": {"type": "integer"}, "maxProperties": 3}},
     "required": ["meta"]},
    {"oneOf": [{"type": OBJ, "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
               {"type": OBJ, "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                "required": ["kind", "side"]}]},
]


def closing_bias(tokenizer) -> np.ndarray:
    """Logit bias that makes random text end: quotes, brackets, commas and EOS up; escapes a bit."""
    bias = np.zeros(tokenizer.n_vocab, np.float32)
    for i in range(tokenizer.n_vocab):
        piece = tokenizer.token_bytes(i)
        if any(c in piece for c in b'"}]'):
            bias[i] += 4.0
        if b"\\" in piece:
            bias[i] += 1.5
    for i in tokenizer.eog_ids:
        bias[i] += 6.0
    return bias


def sample_constrained(tokenizer, kind, source, seed: int, bias: np.ndarray, steps: int = 400) -> str:
    constraint = compile_grammar(tokenizer, kind, source).start()
    rng = np.random.default_rng(seed)
    sampler = Sampler(SamplingParams(temperature=1.0, seed=seed))
    out: list[int] = []
    for _ in range(steps):
        logits = rng.standard_normal(tokenizer.n_vocab).astype(np.float32) * 2 + bias
        token = sampler.sample(constraint.mask_logits(logits))
        if token in tokenizer.eog_ids:
            break
        constraint.advance(token)
        out.append(token)
        if constraint.finished:
            break
    return tokenizer.decode(out)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from tests.conftest import model_file
    from tests.support.tiny_gguf import write_tiny_llama

    tiny = llamay.load(write_tiny_llama(tmp_path_factory.mktemp("tiny") / "t.gguf"), backend="reference", n_seq=1)
    toks = [tiny.tokenizer]
    smollm = model_file("smollm2:135m")
    if smollm is not None:
        from llamay_core.files.gguf_file import open_gguf
        from llamay_core.tokenizer import Tokenizer

        toks.append(Tokenizer.from_metadata(open_gguf(smollm).metadata))
    return [(t, closing_bias(t)) for t in toks]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_schema_output_parses_and_validates(tokenizers, index):
    schema = SCHEMAS[index]
    for tokenizer, bias in tokenizers:
        for seed in range(2):
            text = sample_constrained(tokenizer, "json_schema", schema, seed, bias)
            value = json.loads(text)
            jsonschema.validate(value, schema)


def test_generate_with_schema_grammar_and_regex_on_tiny(tiny_model_path):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=256, n_seq=2)
    schema = {"type": "object", "properties": {"c": {"enum": ["red", "green"]}, "n": {"type": "integer", "maximum": 9,
                                                                                        "minimum": 0}},
              "required": ["c", "n"], "additionalProperties": False}
    for spec in (None, "ngram"):
        text = m.generate("the cat", max_tokens=40, json_schema=schema, speculative=spec)
        jsonschema.validate(json.loads(text), schema)
        assert m.last_stats.finish_reason == "stop"
        assert m.last_stats.lines()[-1].startswith("constraint json_schema · mask ")
    gbnf = 'root ::= answer " " answer\nanswer ::= "yes" | "no" | "maybe"'
    text = m.generate("the cat", max_tokens=20, grammar=gbnf)
    assert re.fullmatch(r"(yes|no|maybe) (yes|no|maybe)", text), text
    text = m.generate("the cat", max_tokens=20, regex=r"[0-9]{3}-[a-c]{2}")
    assert re.fullmatch(r"[0-9]{3}-[a-c]{2}", text), text
    assert m.pool.pages_in_use == 0


def test_response_format(tiny_model_path):
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=128, n_seq=1)
    assert constraint_from_response_format(m, None) is None
    assert constraint_from_response_format(m, {"type": "text"}) is None
    assert constraint_from_response_format(m, {"type": "json_object"}).kind == "json_schema"
    c = constraint_from_response_format(m, {"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})
    assert c is not None
    for bad in ({"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"name": "x"}},
                {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": 5}}}, "json"):
        with pytest.raises(UsageError) as info:
            constraint_from_response_format(m, bad)
        assert "\n" not in str(info.value)


def test_schema_sources_and_errors(tmp_path, tiny_model_path):
    path = tmp_path / "s.json"
    path.write_text('{"type": "object"}')
    assert read_json_schema(str(path)) == {"type": "object"}
    assert read_json_schema('{"type": "string"}') == {"type": "string"}
    with pytest.raises(UsageError, match="cannot read JSON schema file"):
        read_json_schema(str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="not valid JSON"):
        read_json_schema("{nope")
    m = llamay.load(tiny_model_path, backend="reference", n_ctx=128, n_seq=1)
    with pytest.raises(UsageError, match="bad grammar"):
        m.generate("x", max_tokens=2, grammar="root ::= (")
    with pytest.raises(UsageError, match="one constraint"):
        m.generate("x", max_tokens=2, grammar='root ::= "a"', regex="a")


def test_mask_is_one_vectorized_step():
    logits = np.arange(70, dtype=np.float32)
    bitmask = np.zeros(3, np.int32)
    bitmask[0] = 0b1001
    bitmask[2] = 1 << 5  # token 69
    out = apply_mask(logits, bitmask)
    assert np.flatnonzero(np.isfinite(out)).tolist() == [0, 3, 69]
    assert out[3] == 3.0 and out.dtype == np.float32
