"""llama-server's API beside OpenAI's, and Anthropic's Messages API, on a live `llamay serve`.

Request and response fields follow llama-server (tools/server/README.md) and Anthropic's API, so
clients written against those servers work unchanged. A tiny random model keeps it fast.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterator

import httpx
import pytest

import llamay
from tests.e2e.test_server import API_KEY, AUTH, LiveServer, metric, sse_events


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("llama-api") / "tiny-api.gguf", tied=False)


@pytest.fixture(scope="module")
def live(tiny_path) -> Iterator[LiveServer]:
    model = llamay.load(tiny_path, backend="reference", n_ctx=256, n_seq=8, prefix_cache_mib=4)
    server = LiveServer(model, max_running=8, max_waiting=16, prefill_chunk=64, api_key=API_KEY,
                        cors_origins=["http://ui.example"])
    yield server
    server.close()


def native_events(response: httpx.Response) -> list[dict]:
    events = sse_events(response)
    assert "[DONE]" not in events  # llama-server's native stream has no [DONE]
    return events


def test_health_and_models_without_key_everything_else_with_either_header(live):
    for path in ("/health", "/v1/health"):
        r = httpx.get(live.base + path)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
    for path in ("/models", "/v1/models"):
        assert httpx.get(live.base + path).json()["data"][0]["id"] == "tiny-api"
    body = {"prompt": "a", "n_predict": 1}
    assert httpx.post(live.base + "/completions", json=body, headers={"X-Api-Key": API_KEY}).status_code == 200
    for headers in ({"X-Api-Key": "wrong"}, {"Authorization": f"Bearer {API_KEY}x"}, {}):
        r = httpx.post(live.base + "/completions", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_native_completion_fields(live):
    r = live.client.post("/completion", json={"prompt": "the cat", "n_predict": 5, "temperature": 0,
                                              "return_tokens": True, "cache_prompt": True, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stop"] is True and body["stop_type"] == "limit" and body["tokens_predicted"] == 5
    assert len(body["tokens"]) == 5 and live.model.detokenize(body["tokens"]) == body["content"]
    assert body["tokens_evaluated"] == len(live.model.tokenize("the cat", parse_special=True))
    assert body["prompt"] == "the cat" and body["generation_settings"]["n_predict"] == 5
    t = body["timings"]
    assert t["predicted_n"] == 5 and t["predicted_ms"] > 0 and t["prompt_n"] + t["cache_n"] == body["tokens_evaluated"]
    again = live.client.post("/completions", json={"prompt": "the cat", "n_predict": 5, "temperature": 0,
                                                   "ignore_eos": True}).json()
    assert again["content"] == body["content"] and again["tokens"] == []


def test_native_stream_and_n_probs(live):
    request = {"prompt": "a b c", "n_predict": 4, "temperature": 0, "n_probs": 3, "ignore_eos": True,
               "return_tokens": True}
    whole = live.client.post("/completion", json=request).json()
    probs = whole["completion_probabilities"]
    assert len(probs) == 4
    for p, token in zip(probs, whole["tokens"]):
        assert p["id"] == token and len(p["top_logprobs"]) == 3 and p["logprob"] <= 0
        assert p["top_logprobs"][0]["logprob"] >= p["top_logprobs"][-1]["logprob"]
        assert p["top_logprobs"][0]["id"] == token  # greedy: the chosen token is the likeliest
    with live.client.stream("POST", "/completion", json={**request, "stream": True}) as r:
        events = native_events(r)
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == whole["content"]
    assert [t for e in events[:-1] for t in e["tokens"]] == whole["tokens"]
    # Greedy: the distribution drawn from is all on the chosen token.
    post = live.client.post("/completion", json={**request, "post_sampling_probs": True}).json()
    for p in post["completion_probabilities"]:
        assert p["prob"] == 1.0 and [t["prob"] for t in p["top_probs"]] == [1.0, 0.0, 0.0]
    sampled = live.client.post("/completion", json={**request, "temperature": 1.0, "top_k": 2, "seed": 1,
                                                    "post_sampling_probs": True}).json()
    for p in sampled["completion_probabilities"]:
        top = [t["prob"] for t in p["top_probs"]]
        assert math.isclose(sum(top), 1.0, rel_tol=1e-6) and top[2] == 0.0  # top_k 2 keeps two tokens


def test_native_prompt_forms(live):
    ids = live.model.tokenize("the cat", parse_special=True)
    by_ids = live.client.post("/completion", json={"prompt": ids, "n_predict": 3, "temperature": 0}).json()
    by_text = live.client.post("/completion", json={"prompt": "the cat", "n_predict": 3, "temperature": 0}).json()
    assert by_ids["content"] == by_text["content"]
    batch = live.client.post("/completion", json={"prompt": ["the cat", ids, "other"], "n_predict": 3,
                                                  "temperature": 0}).json()
    assert isinstance(batch, list) and [b["index"] for b in batch] == [0, 1, 2]
    assert batch[0]["content"] == batch[1]["content"] == by_text["content"]
    nothing = live.client.post("/completion", json={"prompt": "x", "n_predict": 0}).json()
    assert nothing["content"] == "" and nothing["tokens_predicted"] == 0


def test_openai_batch_prompts_and_n(live):
    body = live.client.post("/v1/completions", json={"prompt": ["one", "two"], "n": 2, "max_tokens": 4,
                                                     "temperature": 1.0, "seed": 3}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert 4 <= body["usage"]["completion_tokens"] <= 16
    one = live.client.post("/v1/completions", json={"prompt": "one", "max_tokens": 4}).json()
    assert body["usage"]["prompt_tokens"] == 2 * one["usage"]["prompt_tokens"]  # each prompt counted once
    chat = {"messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 5, "temperature": 1.2,
            "seed": 9, "ignore_eos": True}
    whole = live.client.post("/v1/chat/completions", json=chat).json()
    assert len(whole["choices"]) == 3
    with live.client.stream("POST", "/chat/completions", json={**chat, "stream": True}) as r:
        events = sse_events(r)
    streamed = ["", "", ""]
    for e in events[:-1]:
        c = e["choices"][0]
        streamed[c["index"]] += c["delta"].get("content") or ""
    assert streamed == [c["message"]["content"] for c in whole["choices"]]


def test_logit_bias_bans_and_forces(live):
    base = {"prompt": "the cat", "max_tokens": 1, "temperature": 0, "n_probs": 1}
    first = live.client.post("/completion", json={**base, "return_tokens": True}).json()["tokens"][0]
    banned = live.client.post("/completion", json={**base, "return_tokens": True,
                                                   "logit_bias": [[first, False]]}).json()["tokens"][0]
    assert banned != first
    forced = live.client.post("/v1/completions", json={"prompt": "the cat", "max_tokens": 3, "temperature": 0,
                                                       "logit_bias": {"104": 100}}).json()
    assert forced["choices"][0]["text"] == live.model.detokenize([104] * 3)


def test_penalties_and_samplers_accepted(live):
    r = live.client.post("/v1/completions", json={"prompt": "a a a", "max_tokens": 8, "temperature": 0.7,
                                                  "presence_penalty": 1.5, "frequency_penalty": 1.0,
                                                  "samplers": ["top_k", "temperature"], "seed": 1})
    assert r.status_code == 200
    assert live.client.post("/completion", json={"prompt": "a", "n_predict": 2, "samplers": "kt"}).status_code == 200


def test_grammar_and_json_schema_fields(live):
    r = live.client.post("/completion", json={"prompt": "answer:", "n_predict": 8, "temperature": 1.0, "seed": 4,
                                              "grammar": 'root ::= "yes" | "no"'}).json()
    assert r["content"] in ("yes", "no")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = live.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                       "max_tokens": 30, "temperature": 0, "json_schema": schema})
    assert set(json.loads(r.json()["choices"][0]["message"]["content"])) == {"ok"}


def test_chat_logprobs_and_timings(live):
    body = live.client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": True, "top_logprobs": 2,
        "temperature": 0}).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert content and all(len(c["top_logprobs"]) == 2 for c in content)
    assert body["timings"]["predicted_n"] == body["usage"]["completion_tokens"]
    with live.client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
            "timings_per_token": True}) as r:
        events = sse_events(r)
    assert "timings" in events[-2]


def test_tokenize_detokenize_template_props_slots(live):
    ids = live.client.post("/tokenize", json={"content": "the cat"}).json()["tokens"]
    assert ids == live.model.tokenize("the cat", add_special=False, parse_special=True)
    with_bos = live.client.post("/tokenize", json={"content": "the cat", "add_special": True}).json()["tokens"]
    assert with_bos == live.model.tokenize("the cat", add_special=True, parse_special=True)
    pieces = live.client.post("/tokenize", json={"content": "the cat", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == "the cat"
    assert live.client.post("/detokenize", json={"tokens": ids}).json() == {"content": "the cat"}
    assert live.client.post("/detokenize", json={"tokens": [10**6]}).status_code == 400
    messages = [{"role": "user", "content": "hello"}]
    prompt = live.client.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert prompt == live.model.chat_prompt(messages)
    props = live.client.get("/props").json()
    assert props["total_slots"] == 8 and props["default_generation_settings"]["n_ctx"] == 256
    assert props["modalities"] == {"vision": False, "audio": False}
    slots = live.client.get("/slots").json()
    assert len(slots) == 8 and all(s["n_ctx"] == 256 for s in slots)


def test_models_without_prefix_and_meta(live):
    body = live.client.get("/models").json()
    assert body["data"][0]["id"] == "tiny-api" and body["data"][0]["meta"]["n_vocab"] == live.model.hparams.n_vocab


def test_unsupported_endpoints_are_501(live):
    for path, body in (("/v1/embeddings", {"input": "x"}), ("/slots/0?action=save", {"filename": "../x.bin"}),
                       ("/slots/0?action=restore", {"filename": "/etc/passwd"})):
        r = live.client.post(path, json=body)
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"


def test_anthropic_messages(live):
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    request = {"model": "claude-whatever", "max_tokens": 4, "system": "be brief", "temperature": 0,
               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    r = httpx.post(live.base + "/v1/messages", json=request, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "message" and body["role"] == "assistant" and body["content"][0]["type"] == "text"
    assert body["stop_reason"] in ("end_turn", "max_tokens") and body["usage"]["output_tokens"] <= 4
    count = httpx.post(live.base + "/v1/messages/count_tokens", json=request, headers=headers).json()
    assert count["input_tokens"] == body["usage"]["input_tokens"]
    with httpx.stream("POST", live.base + "/v1/messages", json={**request, "stream": True}, headers=headers) as s:
        lines = list(s.iter_lines())
    names = [line[len("event: "):] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in data] == names
    assert data[0]["message"]["usage"]["input_tokens"] == body["usage"]["input_tokens"] > 0
    assert data[-2]["usage"]["output_tokens"] > 0
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    bad = httpx.post(live.base + "/v1/messages", json={"messages": request["messages"]}, headers=headers)
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    unauthorized = httpx.post(live.base + "/v1/messages", json=request)
    assert unauthorized.status_code == 401 and unauthorized.json()["error"]["type"] == "authentication_error"


def test_cors_preflight_needs_no_key_and_only_listed_origins(live):
    preflight = {"Origin": "http://ui.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    r = httpx.options(live.base + "/v1/chat/completions", headers=preflight)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://ui.example"
    assert r.headers["access-control-allow-credentials"] == "true"
    r = httpx.options(live.base + "/v1/chat/completions", headers={**preflight, "Origin": "http://evil.example"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    r = httpx.get(live.base + "/v1/models", headers={**AUTH, "Origin": "http://ui.example"})
    assert r.headers["access-control-allow-origin"] == "http://ui.example"


def test_metrics_have_llama_server_names(live):
    live.client.post("/completion", json={"prompt": "metrics", "n_predict": 2})
    text = live.client.get("/metrics").text
    assert metric(text, "llamacpp:tokens_predicted_total") >= 2
    assert metric(text, "llamacpp:prompt_tokens_total") >= 1
    assert metric(text, "llamacpp:n_decode_total") >= 1
    for name in ("llamacpp:kv_cache_usage_ratio", "llamacpp:prompt_tokens_cache_total", "llamacpp:prompt_cache_hit_ratio", "llamacpp:requests_processing", "llamacpp:requests_deferred",
                 "llamay_generated_tokens_total", "llamay_requests_total"):
        metric(text, name)


def test_response_fields_and_assistant_prefill(live):
    body = live.client.post("/completion", json={"prompt": "the cat", "n_predict": 3,
                                                 "response_fields": ["content", "generation_settings/n_predict"]})
    assert set(body.json()) == {"content", "generation_settings/n_predict"}
    assert body.json()["generation_settings/n_predict"] == 3
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, <|im_end|>"}]
    prompt = live.client.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert prompt == live.model.chat_prompt(messages[:1]) + "Sure, <|im_end|>"
    im_end = live.model.tokenizer.token_to_id("<|im_end|>")
    ids = live.app.state.llamay.engine.chat_ids(messages)
    assert ids.count(im_end) == 1  # the prefill's look-alike marker is text


def test_context_limits_as_llama_server(live):
    """A prompt over the context is a 400 naming it; output cut by the context is `truncated`."""
    for prompt in ("x " * 300, "the cat " * 40_000):  # the second, over 64 KiB, is read off the event loop
        r = live.client.post("/completion", json={"prompt": prompt, "n_predict": 4})
        assert r.status_code == 400 and "exceeds the available context size" in r.json()["error"]["message"]
    n_prompt = len(live.model.tokenize("the", parse_special=True))
    full = live.client.post("/completion", json={"prompt": "the", "n_predict": -1, "ignore_eos": True,
                                                 "temperature": 0}).json()
    assert full["truncated"] is True and full["timings"]["predicted_n"] == 256 - n_prompt
    short = live.client.post("/completion", json={"prompt": "the", "n_predict": 4, "ignore_eos": True}).json()
    assert short["truncated"] is False and short["stop_type"] == "limit"
    unbounded = live.client.post("/v1/completions", json={"prompt": "the", "ignore_eos": True}).json()
    assert unbounded["usage"]["completion_tokens"] == 256 - n_prompt  # no max_tokens: until the context is full
    by_n_predict = live.client.post("/v1/completions", json={"prompt": "the", "n_predict": 3, "ignore_eos": True})
    assert by_n_predict.json()["usage"]["completion_tokens"] == 3
