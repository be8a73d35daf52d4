"""`llamay serve -replicas 2` on a local Ray instance (loopback), smollm2, 1 thread per replica.

One cluster serves the module (starting Ray and two replicas takes most of the time: about a
minute on the 2-core CI machine, so only the routing test runs by default). The
routes are the single server's own (`server/app.py`); the tests check what the cluster adds:
same outputs as one server, prefix-aware routing measured by the replicas' cached_tokens, and
a killed replica losing only the requests it had in flight.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
import uvicorn

pytest.importorskip("ray.serve", reason="needs the cluster extra: pip install 'llamay[cluster]'")

import llamay  # noqa: E402
from llamay_core.cluster.deploy import start_cluster  # noqa: E402
from llamay_core.cluster.replica import ReplicaConfig  # noqa: E402
from llamay_core.cluster.serve import build_front  # noqa: E402
from llamay_core.server.app import create_app  # noqa: E402

MODEL = "smollm2:135m"
SYSTEM = ("You are a careful assistant for a small bakery. You answer questions about bread, opening "
          "hours, prices and allergens. Keep answers short, friendly and precise. ") * 3
SEEDED = [
    {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0},
    {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "seed": 7},
    {"messages": [{"role": "user", "content": "Name a fruit."}], "max_tokens": 10, "temperature": 0.7, "seed": 11},
]


def model_available() -> bool:
    from llamay_core.files.model_names import resolve_model

    try:
        return resolve_model(MODEL, pull_missing=False).exists()
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not model_available(), reason="smollm2 is not downloaded")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An app under uvicorn in a thread on 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=180)

    def post(self, body: dict[str, Any]) -> httpx.Response:
        route = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        return self.client.post(route, json={"model": MODEL, **body})

    def close(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(60)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, Served]]:
    config = ReplicaConfig(model=MODEL, backend="cpu", threads=1, n_ctx=1024, max_running=4, max_waiting=16,
                           prefix_cache_mib=32)
    ray_cluster = start_cluster(config, 2)
    try:
        served = Served(build_front(config, ray_cluster))
        try:
            yield ray_cluster, served
        finally:
            served.close()
    finally:
        ray_cluster.shutdown()


def scheduler_of(served: Served) -> Any:
    return served.app.state.llamay.engine.scheduler


def replica_cached_tokens(served: Served) -> dict[str, float]:
    text = served.client.get("/metrics").text
    out = {}
    for line in text.splitlines():
        if line.startswith("llamay_replica_cached_tokens{"):
            name = line.split('replica="')[1].split('"')[0]
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


def wait_for_probe(served: Served, predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate(scheduler_of(served)):
        if time.monotonic() > deadline:
            raise AssertionError("the cluster did not reach the expected state in time")
        time.sleep(0.2)


@pytest.mark.slow  # the same comparison runs in-process on a tiny model in tests/unit/test_cluster_adapter.py
def test_seeded_requests_match_a_single_server(cluster):
    _, served = cluster
    got = [served.post(body).json() for body in SEEDED]
    single = Served(create_app(llamay.load(MODEL, backend="cpu", n_ctx=1024, n_seq=4), max_running=4))
    try:
        want = [single.post(body).json() for body in SEEDED]
    finally:
        single.close()
    for g, w in zip(got, want):
        g_choice, w_choice = g["choices"][0], w["choices"][0]
        assert g_choice.get("text", g_choice.get("message")) == w_choice.get("text", w_choice.get("message"))
        assert g_choice["finish_reason"] == w_choice["finish_reason"]
        assert g["usage"]["completion_tokens"] == w["usage"]["completion_tokens"]
    # Streaming goes through the same routes: the chunks join to the same text.
    with served.client.stream("POST", "/v1/completions", json={**SEEDED[1], "stream": True}) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == want[1]["choices"][0]["text"]


def test_a_shared_prefix_workload_lands_on_one_replica(cluster):
    _, served = cluster
    before = replica_cached_tokens(served)
    usages = [served.post({"prompt": SYSTEM + f"Question {i}: do you sell rye bread?", "max_tokens": 2,
                           "temperature": 0}).json()["usage"] for i in range(4)]
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    prompt = usages[0]["prompt_tokens"]
    assert all(c >= prompt - 32 for c in cached[1:]), cached  # all but the question's last pages reused
    assert 'outcome="hit"' in served.client.get("/metrics").text

    def gained() -> dict[str, float]:
        return {k: v - before.get(k, 0.0) for k, v in replica_cached_tokens(served).items()}

    # The replicas' counters reach /metrics with the next health probe.
    wait_for_probe(served, lambda s: sum(gained().values()) >= sum(cached), timeout=30)
    assert sorted(gained().values()) == [0.0, float(sum(cached))], gained()


@pytest.mark.slow
def test_a_killed_replica_fails_only_its_in_flight_stream_and_restarts(cluster):
    _, served = cluster
    sched = scheduler_of(served)
    wait_for_probe(served, lambda s: all(s.up) and all(s.pids))
    events: list[str] = []
    streaming = threading.Event()

    def long_stream() -> None:
        body = {"model": MODEL, "prompt": "Write a long story about a dragon.", "max_tokens": 1000,
                "temperature": 0, "ignore_eos": True, "stream": True}
        with served.client.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) >= 3:
                        streaming.set()

    streamer = threading.Thread(target=long_stream)
    streamer.start()
    assert streaming.wait(120), "the stream never started"
    victim = sched.load.index(1)
    old_pid = sched.pids[victim]
    os.kill(old_pid, signal.SIGKILL)  # mid-stream: tokens reached the client already
    streamer.join(120)
    assert not streamer.is_alive()
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["error"]["type"] == "server_error" and "failed" in last["error"]["message"]
    # Requests sent after the kill all complete, exactly once each.
    answers = [served.post({"prompt": f"Count to {i}:", "max_tokens": 4, "temperature": 0}) for i in range(4)]
    assert [a.status_code for a in answers] == [200] * 4
    assert all(a.json()["usage"]["completion_tokens"] == 4 for a in answers)
    # Ray restarts the dead replica; the front sees it come back with a new process.
    wait_for_probe(served, lambda s: s.up[victim] and s.pids[victim] != old_pid, timeout=180)
