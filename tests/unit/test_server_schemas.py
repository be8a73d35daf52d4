"""Request validation of `llamay serve` (schemas.py), without a model or a server."""
from __future__ import annotations

import json
import math

import pytest

from llamay_core.server.schemas import ApiError, parse_generation, parse_json, parse_prompts, parse_request


def words(text: str) -> list[int]:
    return [len(w) for w in text.split()]  # a stand-in tokenizer: one id per word


def gen(**body):
    return parse_generation(body, n_vocab=100, tokenize=words)


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'{"a": -Infinity}', b"[" * 3000 + b"]" * 3000, b'{"a": "\xff"}',
                                 b'{"a": "\\udc00"}', b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}", b"[]", b"12"])
def test_bad_bodies_are_400(raw):
    with pytest.raises(ApiError) as err:
        parse_json(raw)
    assert err.value.status == 400


def test_a_body_at_the_depth_limit_is_read():
    assert parse_json(b'{"a": ' + b"[" * 62 + b"]" * 62 + b"}")["a"]


@pytest.mark.parametrize("seed,expected", [(None, None), (-1, None), (0, 0), (7, 7), (-2, 2**64 - 2),
                                           (2**70, 2**70 % 2**64)])
def test_seeds(seed, expected):
    assert gen(seed=seed).seed == expected


@pytest.mark.parametrize("body", [{"temperature": float("nan")}, {"temperature": math.inf}, {"top_p": 2},
                                  {"repeat_penalty": 0}, {"repeat_penalty": -1}, {"frequency_penalty": 2.5},
                                  {"seed": 1.5}, {"seed": True}, {"top_k": -1}, {"min_p": -0.1},
                                  {"logit_bias": {"100": 1}}, {"logit_bias": {"5": math.nan}},
                                  {"logit_bias": [[1, 2, 3]]}, {"logit_bias": "x"}, {"stop": [1]},
                                  {"stop": ["a"] * 17}, {"grammar": 5}, {"json_schema": "/etc/passwd"},
                                  {"json_schema": 12}, {"response_format": {"type": "json_schema"}},
                                  {"response_format": "json"}, {"samplers": ["nope"]}, {"samplers": "kz"}])
def test_bad_generation_fields_are_400(body):
    with pytest.raises(ApiError) as err:
        gen(**body)
    assert err.value.status == 400 and err.value.param


def test_logit_bias_forms():
    assert gen(logit_bias={"5": 2.5, "7": False}).logit_bias == {5: 2.5, 7: -math.inf}
    assert gen(logit_bias=[[5, -1], ["ab cde", 3]]).logit_bias == {5: -1.0, 2: 3.0, 3: 3.0}
    assert gen(logit_bias={"ab": 1}).logit_bias == {2: 1.0}


def test_constraints_are_data():
    schema = {"type": "object"}
    assert gen(json_schema=json.dumps(schema)).constraint.source == schema
    assert gen(response_format={"type": "json_object"}).constraint.source == schema
    assert gen(grammar='root ::= "a"').constraint.kind == "grammar"
    with pytest.raises(ApiError):
        gen(grammar='root ::= "a"', response_format={"type": "json_object"})


def test_samplers_left_out_are_off():
    g = gen(top_k=5, top_p=0.5, min_p=0.1, repeat_penalty=1.3, samplers=["temperature"])
    assert (g.top_k, g.top_p, g.min_p, g.repeat_penalty) == (0, 1.0, 0.0, 1.0)


@pytest.mark.parametrize("body", [
    {"typical_p": 0.5}, {"typ_p": 0.9}, {"dynatemp_range": 0.5}, {"xtc_probability": 0.5},
    {"dry_multiplier": 0.8}, {"top_n_sigma": 1.5}, {"mirostat": 2}, {"t_max_predict_ms": 500}, {"n_cmpl": 3},
    {"typical_p": 0.5, "samplers": ["typical_p", "temperature"]}, {"xtc_probability": 0.5, "samplers": "xt"},
])
def test_a_sampler_llamay_lacks_is_refused_when_switched_on(body):
    name = next(iter(body))
    with pytest.raises(ApiError) as err:
        gen(**body)
    assert (err.value.status, err.value.param) == (400, name)
    assert "llamay does not have" in str(err.value.message)


@pytest.mark.parametrize("body", [
    # what llama-server's web UI sends: every sampler at the value that switches it off
    {"typical_p": 1, "dynatemp_range": 0, "dynatemp_exponent": 1, "xtc_probability": 0, "xtc_threshold": 0.1,
     "dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "top_n_sigma": -1,
     "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1, "t_max_predict_ms": 0, "n_keep": 0, "n_cmpl": 1},
    {"typical_p": 0.5, "samplers": ["top_k", "temperature"]},  # listed off
    {"xtc_probability": 0.5, "xtc_threshold": 0.6},  # llama.cpp's XTC is off above a threshold of 0.5
    {"dry_multiplier": 0.8, "dry_penalty_last_n": 0},
])
def test_samplers_llamay_lacks_are_accepted_while_off(body):
    assert gen(**body).temperature == 1.0


@pytest.mark.parametrize("body", [{"typical_p": "x"}, {"mirostat": 1.5}, {"dry_base": math.nan}])
def test_samplers_llamay_lacks_are_still_type_checked(body):
    with pytest.raises(ApiError):
        gen(**body)


def test_prompt_forms():
    assert parse_prompts("a", True) == ("a",)
    assert parse_prompts([1, 2], True) == ([1, 2],)
    assert parse_prompts([1, "x", 2], True) == ([1, "x", 2],)
    assert parse_prompts(["a", [1, 2]], True) == ("a", [1, 2])
    for bad in (12, [], [1.5], {"a": 1}, [None]):
        with pytest.raises(ApiError):
            parse_prompts(bad, True)


def test_openai_request_limits():
    req = parse_request({"prompt": ["a", "b"], "n": 3}, chat=False, n_vocab=100, tokenize=words)
    assert req.n == 3 and len(req.prompts) == 2
    with pytest.raises(ApiError):
        parse_request({"prompt": ["a"] * 30, "n": 3}, chat=False, n_vocab=100, tokenize=words)
    with pytest.raises(ApiError):
        parse_request({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, chat=True,
                      n_vocab=100, tokenize=words)
