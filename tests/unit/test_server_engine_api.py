"""The routes over another `Engine`: what a remote-replica implementation would plug into.

A small engine here answers every request with its prompt's ids echoed back as text; the routes
must serve it through all three APIs without knowing there is no model behind it.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Mapping, Sequence

from starlette.testclient import TestClient

from llamay_core.server.app import create_app_for_engine
from llamay_core.server.engine_api import EngineBusy, GenerationRequest, ModelInfo
from llamay_core.server.scheduler import Delta, Event, Finished, Timings, Usage

INFO = ModelInfo(names=("echo", "echo-alias"), n_ctx=64, n_ctx_train=64, n_vocab=1000, n_embd=8, n_params=1,
                 size=1, path="/models/echo.gguf", architecture="echo", chat_template="", bos_token="",
                 eos_token="", total_slots=2, backend="none", device="nowhere", gpu=False)


class EchoStream:
    def __init__(self, request: GenerationRequest) -> None:
        self.request = request
        self.cancelled = False

    async def __aiter__(self) -> AsyncIterator[Event]:
        ids = list(self.request.prompt_ids[: self.request.max_tokens])
        for token in ids:
            yield Delta(f"<{token}>", [], [token])
        n = len(self.request.prompt_ids)
        yield Finished("length", Usage(n, len(ids), 0), stop_type="limit",
                       timings=Timings(prompt_n=n, predicted_n=len(ids)))

    def cancel(self) -> None:
        self.cancelled = True


class EchoEngine:
    info = INFO

    def __init__(self) -> None:
        self.submitted: list[GenerationRequest] = []
        self.busy = False

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return [len(w) for w in text.split()]

    def detokenize(self, ids: Sequence[int]) -> str:
        return "".join(f"<{i}>" for i in ids)

    def token_bytes(self, token: int) -> bytes:
        return f"<{token}>".encode()

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return " ".join(m["content"] for m in messages)

    def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return self.tokenize(self.chat_prompt(messages), True, False)

    async def submit(self, request: GenerationRequest) -> EchoStream:
        if self.busy:
            raise EngineBusy("no replica free")
        self.submitted.append(request)
        return EchoStream(request)

    def health(self) -> dict[str, Any]:
        return {"ok": True, "failure": "", "queue_depth": 0, "running": 0, "kv_pages_used": 0, "kv_pages_total": 1}

    def slots(self) -> list[dict[str, Any]]:
        return [{"id": 0, "n_ctx": 64, "is_processing": False}]

    def metrics(self) -> bytes:
        return b"echo_requests_total 1.0\n"


def test_routes_serve_any_engine():
    engine = EchoEngine()
    client = TestClient(create_app_for_engine(engine))
    r = client.post("/v1/completions", json={"prompt": "aa bbb", "max_tokens": 5, "seed": -1})
    assert r.json()["choices"][0]["text"] == "<2><3>" and r.json()["model"] == "echo"
    assert engine.submitted[-1].params.seed is None
    r = client.post("/completion", json={"prompt": "a bb ccc", "n_predict": 2, "return_tokens": True})
    assert r.json()["content"] == "<1><2>" and r.json()["tokens"] == [1, 2]
    r = client.post("/v1/messages", json={"model": "echo-alias", "max_tokens": 9,
                                          "messages": [{"role": "user", "content": "hey you"}]})
    assert r.json()["content"][0]["text"] == "<3><3>" and r.json()["model"] == "echo-alias"
    assert client.get("/v1/models").json()["data"][0]["aliases"] == ["echo", "echo-alias"]
    assert b"echo_requests_total" in client.get("/metrics").content
    engine.busy = True
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
