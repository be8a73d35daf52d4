"""`llamay serve` end to end: a real uvicorn server on a free loopback port, real HTTP.

Most tests share one in-process server over a tiny random model (fast); the tests can slow its
forward passes to hold requests in flight. One test runs the `llamay serve` command in a
subprocess (SIGTERM drain), and one drives smollm2 with the official `openai` client.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import uvicorn

import llamay
from llamay_core.server.app import create_app

API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """An app served by uvicorn in a thread on 127.0.0.1; `close()` shuts it down."""

    def __init__(self, model: Any, **app_options: Any) -> None:
        self.model = model
        self.app = create_app(model, **app_options)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=self.base, headers=AUTH, timeout=30)

    @property
    def scheduler(self) -> Any:
        return self.app.state.scheduler

    def close(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(30)

    @contextlib.contextmanager
    def slowed(self, seconds: float) -> Iterator[None]:
        """Make every forward pass take at least `seconds`, so requests stay in flight."""
        original = self.model.forward.run_many

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return original(*args, **kwargs)

        self.model.forward.run_many = slow
        try:
            yield
        finally:
            del self.model.forward.run_many

    @contextlib.contextmanager
    def held(self) -> Iterator[threading.Event]:
        """Forward passes wait until the yielded event is set: requests pile up meanwhile."""
        original = self.model.forward.run_many
        gate = threading.Event()

        def gated(*args: Any, **kwargs: Any) -> Any:
            gate.wait(30)
            return original(*args, **kwargs)

        self.model.forward.run_many = gated
        try:
            yield gate
        finally:
            gate.set()
            del self.model.forward.run_many


def metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(name)


def sse_events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of a stream: JSON objects, and the final "[DONE]" string."""
    events = []
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@pytest.fixture(scope="module")
def tiny_flat_path(tmp_path_factory) -> Path:
    """A tiny model with flat logits (untied output), so sampling and argmax are sensitive."""
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("serve") / "tiny-flat.gguf", tied=False)


@pytest.fixture(scope="module")
def live(tiny_flat_path) -> Iterator[LiveServer]:
    model = llamay.load(tiny_flat_path, backend="reference", n_ctx=256, n_seq=16, prefix_cache_mib=8)
    server = LiveServer(model, max_running=16, max_waiting=16, prefill_chunk=32, api_key=API_KEY,
                        max_body_bytes=64 * 1024)
    yield server
    server.close()


def test_healthz_needs_no_key_and_describes_the_server(live):
    r = httpx.get(live.base + "/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["model"] == "tiny-flat" and body["backend"] == "reference"
    assert body["gpu"] is False and body["device"]
    assert body["queue_depth"] == 0 and "kv_pages_used" in body


@pytest.mark.parametrize("method,path", [("GET", "/props"), ("GET", "/metrics"), ("POST", "/completion"),
                                         ("POST", "/v1/completions"), ("POST", "/v1/chat/completions")])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}])
def test_every_other_endpoint_needs_the_key(live, method, path, headers):
    r = httpx.request(method, live.base + path, headers=headers, json={"prompt": "a", "max_tokens": 1})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"


def test_models_lists_the_served_model(live):
    body = live.client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["tiny-flat"]


def test_completion_answers_in_openai_shape(live):
    r = live.client.post("/v1/completions", json={"model": "tiny-flat", "prompt": "the cat", "max_tokens": 5,
                                                  "temperature": 0})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    assert choice["finish_reason"] in ("length", "stop") and isinstance(choice["text"], str)
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(live.model.tokenize("the cat", parse_special=True))
    assert 1 <= usage["completion_tokens"] <= 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_completion_stream_format_matches_the_whole_answer(live):
    request = {"prompt": "streaming test", "max_tokens": 12, "temperature": 0.8, "seed": 7}
    whole = live.client.post("/v1/completions", json=request).json()
    with live.client.stream("POST", "/v1/completions",
                            json={**request, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == whole["choices"][0]["text"]


def test_chat_completion_stream_and_whole(live):
    request = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
               "max_tokens": 6, "temperature": 0}
    whole = live.client.post("/v1/chat/completions", json=request).json()
    assert whole["object"] == "chat.completion"
    message = whole["choices"][0]["message"]
    assert message["role"] == "assistant"
    expected_prompt = live.model.tokenize(live.model.chat_prompt(request["messages"]), parse_special=True)
    assert whole["usage"]["prompt_tokens"] == len(expected_prompt)
    with live.client.stream("POST", "/v1/chat/completions", json={**request, "stream": True}) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == message["content"]


BAD_REQUESTS = [
    ("malformed json", "/v1/completions", b'{"prompt": ', 400),
    ("not an object", "/v1/completions", b'["a"]', 400),
    ("prompt wrong type", "/v1/completions", {"prompt": 12}, 400),
    ("max_tokens wrong type", "/v1/completions", {"prompt": "a", "max_tokens": "5"}, 400),
    ("temperature wrong type", "/v1/completions", {"prompt": "a", "temperature": "hot"}, 400),
    ("stream wrong type", "/v1/completions", {"prompt": "a", "stream": "yes"}, 400),
    ("max_tokens zero", "/v1/completions", {"prompt": "a", "max_tokens": 0}, 400),
    ("max_tokens bool", "/v1/completions", {"prompt": "a", "max_tokens": True}, 400),
    ("n above the limit", "/v1/completions", {"prompt": "a", "n": 17}, 400),
    ("top_p out of range", "/v1/completions", {"prompt": "a", "top_p": 1.5}, 400),
    ("token id out of vocab", "/v1/completions", {"prompt": [1, 99999]}, 400),
    ("prompt longer than the context", "/v1/completions", {"prompt": "x " * 300}, 400),
    ("messages missing", "/v1/chat/completions", {"prompt": "a"}, 400),
    ("message without role", "/v1/chat/completions", {"messages": [{"content": "a"}]}, 400),
    ("chat max_tokens zero", "/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                                                      "max_tokens": 0}, 400),
    ("body too large", "/v1/completions", {"prompt": "a" * 70_000}, 413),
]


@pytest.mark.parametrize("case,path,body,status", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_input_gets_an_openai_error(live, case, path, body, status):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = live.client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"]
    assert set(error) == {"message", "type", "param", "code"}


def test_unknown_route_is_a_json_404(live):
    r = live.client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_prefix_cache_reports_and_skips_cached_tokens(live):
    prompt = "a long shared system prompt about caching, " * 2
    first = live.client.post("/v1/completions", json={"prompt": prompt + "one", "max_tokens": 2}).json()
    second = live.client.post("/v1/completions", json={"prompt": prompt + "two", "max_tokens": 2}).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    page = live.model.kv_spec.page_size
    assert cached > 0 and cached % page == 0
    assert cached >= (second["usage"]["prompt_tokens"] - 8) // page * page - page


def test_stop_string_ends_the_text(live):
    request = {"prompt": "stop here", "max_tokens": 30, "temperature": 0}
    text = live.client.post("/v1/completions", json=request).json()["choices"][0]["text"]
    stop = text[10:12]
    assert len(stop) == 2
    body = live.client.post("/v1/completions", json={**request, "stop": [stop]}).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["text"] == text[:text.find(stop)]


def test_logprobs_in_both_shapes(live):
    body = live.client.post("/v1/completions", json={"prompt": "probs", "max_tokens": 3, "temperature": 0,
                                                     "logprobs": 2}).json()
    lp = body["choices"][0]["logprobs"]
    n = body["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n
    assert all(v <= 0 for v in lp["token_logprobs"])
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"])  # keyed by text: byte tokens may share one
    # greedy: the chosen token is the most likely one
    assert all(lp["token_logprobs"][i] == max(lp["top_logprobs"][i].values()) for i in range(n))
    chat = live.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                          "max_tokens": 2, "logprobs": True,
                                                          "top_logprobs": 3}).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert content and all(len(t["top_logprobs"]) == 3 and "bytes" in t for t in content)


def test_disconnect_mid_stream_frees_the_sequence(live):
    used_before = live.client.get("/healthz").json()["kv_pages_used"]
    generated_before = metric(live.client.get("/metrics").text, "llamay_generated_tokens_total")
    with live.slowed(0.02):
        with httpx.Client(base_url=live.base, headers=AUTH, timeout=30) as client:
            with client.stream("POST", "/v1/completions",
                               json={"prompt": "disconnect me", "max_tokens": 200, "stream": True,
                                     "ignore_eos": True}) as r:
                lines = r.iter_lines()
                assert next(lines).startswith("data: ")
                assert live.scheduler.n_running == 1
                # leaving the block closes the connection mid-stream
        deadline = time.monotonic() + 5
        while live.scheduler.n_running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert live.scheduler.n_running == 0
    health = live.client.get("/healthz").json()
    assert health["running"] == 0 and health["queue_depth"] == 0
    # Only the prefix cache may keep pages of the cancelled request (at most its full pages).
    assert health["kv_pages_used"] - used_before <= 200 // live.model.kv_spec.page_size
    generated = metric(live.client.get("/metrics").text, "llamay_generated_tokens_total") - generated_before
    assert generated < 150  # stopped long before max_tokens


def test_disconnect_while_waiting_for_a_whole_answer_frees_the_sequence(live):
    with live.slowed(0.02):
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
            httpx.post(live.base + "/v1/completions", headers=AUTH, timeout=0.5,
                       json={"prompt": "impatient", "max_tokens": 240, "ignore_eos": True})
        deadline = time.monotonic() + 2  # finishing the 240 tokens would take 4.8 s
        while live.scheduler.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert live.scheduler.in_flight == 0


def test_queue_full_is_a_503_with_retry_after(tiny_flat_path):
    model = llamay.load(tiny_flat_path, backend="reference", n_ctx=256, n_seq=1)
    server = LiveServer(model, max_running=1, max_waiting=0)
    try:
        with server.slowed(0.02), server.client.stream(
                "POST", "/v1/completions", json={"prompt": "busy", "max_tokens": 100, "stream": True,
                                                 "ignore_eos": True}) as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the response
            assert next(lines).startswith("data: ")
            busy = httpx.post(server.base + "/v1/completions", json={"prompt": "me too", "max_tokens": 1})
            assert busy.status_code == 503
            assert int(busy.headers["retry-after"]) >= 1
            assert busy.json()["error"]["code"] == "server_busy"
        assert server.client.get("/healthz").json()["queue_depth"] == 0
    finally:
        server.close()


def test_batch_invariance_sixteen_concurrent_equal_one_at_a_time(live):
    """Same request, same seed: the same tokens alone or beside 15 others (greedy and sampled)."""
    requests = []
    for i in range(16):
        request = {"prompt": f"request number {i}: " + "words " * i, "max_tokens": 24,
                   "temperature": 0.0 if i % 4 == 0 else 1.0, "seed": 1000 + i, "top_k": 0 if i % 2 else 40,
                   "logprobs": 1}
        requests.append(request)

    async def run_all(gate: threading.Event) -> list[dict]:
        async with httpx.AsyncClient(base_url=live.base, headers=AUTH, timeout=60) as client:
            replies = [asyncio.ensure_future(client.post("/v1/completions", json=r)) for r in requests]
            deadline = time.monotonic() + 30
            while live.scheduler.in_flight < len(requests) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            gate.set()  # all 16 are queued or running: from here they step together
            return [r.json() for r in await asyncio.gather(*replies)]

    text = live.client.get("/metrics").text
    wide_before = metric(text, "llamay_batch_size_count") - metric(text, "llamay_batch_size_bucket", le="8.0")
    with live.held() as gate:
        together = asyncio.run(run_all(gate))
    text = live.client.get("/metrics").text
    wide_steps = metric(text, "llamay_batch_size_count") - metric(text, "llamay_batch_size_bucket", le="8.0")
    assert wide_steps - wide_before > 0, "the 16 requests never shared a step"
    alone = [live.client.post("/v1/completions", json=r).json() for r in requests]
    for i, (a, b) in enumerate(zip(together, alone)):
        assert a["choices"][0]["logprobs"]["tokens"] == b["choices"][0]["logprobs"]["tokens"], f"request {i}"
        assert a["choices"][0]["text"] == b["choices"][0]["text"], f"request {i}"


def test_metrics_in_prometheus_format(live):
    live.client.post("/v1/completions", json={"prompt": "metrics", "max_tokens": 2})
    r = live.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert metric(text, "llamay_requests_total", route="/v1/completions", status="200") >= 1
    assert metric(text, "llamay_requests_total", route="/v1/completions", status="400") >= 1
    assert metric(text, "llamay_prompt_tokens_total") > 0
    assert metric(text, "llamay_generated_tokens_total") > 0
    assert metric(text, "llamay_cached_tokens_total") >= 0
    for name in ("llamay_queue_seconds_count", "llamay_prefill_seconds_count", "llamay_decode_seconds_count",
                 "llamay_batch_size_count"):
        assert metric(text, name) > 0
    assert metric(text, "llamay_kv_pages_total") == live.model.pool.capacity
    assert metric(text, "llamay_kv_pages_used") >= 0 and metric(text, "llamay_queue_depth") == 0


def test_serve_command_drains_in_flight_requests_on_sigterm(tmp_path):
    from tests.support.serve_process import serve_process
    from tests.support.tiny_gguf import write_tiny_llama

    path = write_tiny_llama(tmp_path / "tiny.gguf")  # tied: greedy text never reaches EOS
    args = ["-m", str(path), "-backend", "reference", "-ctx", "1400", "-concurrency", "2", "-shutdown-timeout", "120"]
    with serve_process(args, free_port(), ready_path="/healthz") as (proc, base):
        with httpx.stream("POST", base + "/v1/completions", timeout=60,
                          json={"prompt": "drain", "max_tokens": 600, "temperature": 0, "stream": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            proc.send_signal(signal.SIGTERM)
            events = [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]" for line in lines if line]
        assert events[-1] == "[DONE]"
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        assert len([e for e in events if e != "[DONE]" and e["choices"][0]["text"]]) == 599  # nothing cut short
        # uvicorn re-raises the signal once drained, so the exit status says "terminated by SIGTERM"
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        with pytest.raises(httpx.TransportError):
            httpx.get(base + "/healthz", timeout=1)


@pytest.mark.model
def test_official_openai_client_against_smollm2(smollm_ref):
    openai = pytest.importorskip("openai")
    server = LiveServer(smollm_ref, max_running=2, api_key=API_KEY)
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        models = client.models.list().data
        assert len(models) == 1
        model_id = models[0].id
        done = client.completions.create(model=model_id, prompt="The capital of France is", max_tokens=2,
                                         temperature=0)
        assert done.choices[0].text and done.usage.completion_tokens == 2
        assert done.usage.prompt_tokens_details.cached_tokens == 0
        stream = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=2, temperature=0, stream=True)
        pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
        assert "".join(pieces)
        other = client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        assert other.usage.completion_tokens == 1  # one model served: any name reaches it
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model=model_id, prompt="x", max_tokens=0)
    finally:
        server.close()


def test_response_format_json_schema_is_obeyed_and_bad_ones_refused(live):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    r = live.client.post("/v1/completions", json={
        "prompt": "the cat", "max_tokens": 60, "temperature": 0.7, "seed": 3,
        "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}})
    assert r.status_code == 200, r.text
    value = json.loads(r.json()["choices"][0]["text"])
    assert set(value) == {"n", "ok"} and isinstance(value["n"], int) and isinstance(value["ok"], bool)
    r = live.client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "temperature": 0,
        "response_format": {"type": "json_object"}})
    assert r.status_code == 200
    text = r.json()["choices"][0]["message"]["content"]
    if r.json()["choices"][0]["finish_reason"] == "stop":
        json.loads(text)
    for bad in ({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}, {"type": "xml"}, "json"):
        r = live.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "response_format": bad})
        assert r.status_code == 400, (bad, r.text)
        assert "error" in r.json()
