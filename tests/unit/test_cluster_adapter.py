"""ClusterScheduler behind the real routes, over in-process EngineReplicas on a tiny model (no Ray).

What Ray adds (processes, restarts) is covered by tests/e2e/test_cluster.py; here the front's
own logic runs in milliseconds: same answers as one server, prefix routing, and what a replica
failing before or after its first event does to a request.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
from starlette.testclient import TestClient

import llamay
from llamay_core.cluster.adapter import ClusterScheduler
from llamay_core.cluster.front import FrontModel
from llamay_core.cluster.replica import EngineReplica, JobSpec, ReplicaConfig
from llamay_core.server.app import create_app

PREFIX = "the quick brown fox jumps over the lazy dog while the cat sleeps; " * 2


class InProcessReplica:
    """A ReplicaClient calling an EngineReplica directly; `fail` makes it die before or after its first event."""

    def __init__(self, name: str, replica: EngineReplica) -> None:
        self.name = name
        self.replica = replica
        self.fail: str | None = None
        self.calls = 0

    async def stream(self, spec: JobSpec) -> AsyncIterator[Any]:
        self.calls += 1
        if self.fail == "before":
            raise ConnectionError("the replica process died")
        async with contextlib.aclosing(self.replica.generate(spec)) as events:
            sent = 0
            async for event in events:
                if self.fail == "after" and sent == 1:
                    raise ConnectionError("the replica process died")
                sent += 1
                yield event

    async def stats(self) -> dict[str, Any]:
        # The health probe keeps answering: a replica can die between two probes, and the
        # requests routed to it in between must not be lost.
        return self.replica.stats()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("cluster") / "tiny.gguf", tied=False)


@pytest.fixture(scope="module")
def replicas(tiny_path) -> Iterator[list[EngineReplica]]:
    config = ReplicaConfig(model=str(tiny_path), backend="reference", n_ctx=256, max_running=4, max_waiting=4,
                           prefix_cache_mib=8)
    engines = [EngineReplica(config) for _ in range(2)]
    yield engines
    for engine in engines:
        engine.scheduler.stop()


@pytest.fixture()
def front(tiny_path, replicas) -> Iterator[tuple[TestClient, ClusterScheduler, list[InProcessReplica]]]:
    clients = [InProcessReplica(f"r{k}", engine) for k, engine in enumerate(replicas)]
    scheduler = ClusterScheduler(clients, page_size=replicas[0].model.kv_spec.page_size, max_running=4,
                                 max_waiting=4, probe_interval_s=0.05)
    model = FrontModel(str(tiny_path), replicas[0].describe(), 2, lambda: scheduler.latest)
    with TestClient(create_app(model, scheduler=scheduler)) as client:
        yield client, scheduler, clients


def complete(client: TestClient, prompt: str, **extra: Any) -> Any:
    return client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 6, "temperature": 0, **extra})


def stream_events(client: TestClient, prompt: str) -> list[Any]:
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as r:
        return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
                for line in r.iter_lines() if line.startswith("data: ")]


def test_answers_match_one_server(tiny_path, front):
    client, _, _ = front
    bodies = [{"prompt": "hello there", "temperature": 0}, {"prompt": "a b c d", "temperature": 0.9, "seed": 5}]
    got = [complete(client, **b).json()["choices"][0]["text"] for b in bodies]
    model = llamay.load(tiny_path, backend="reference", n_ctx=256, n_seq=4)
    with TestClient(create_app(model, max_running=4)) as single:
        want = [complete(single, **b).json()["choices"][0]["text"] for b in bodies]
    assert got == want


def test_response_format_is_compiled_on_the_replica_and_matches_one_server(tiny_path, front):
    client, _, _ = front
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = {"prompt": "give json", "max_tokens": 24, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    got = client.post("/v1/completions", json=body)
    assert got.status_code == 200, got.text
    model = llamay.load(tiny_path, backend="reference", n_ctx=256, n_seq=4)
    with TestClient(create_app(model, max_running=4)) as single:
        want = single.post("/v1/completions", json=body).json()
    assert got.json()["choices"][0]["text"] == want["choices"][0]["text"]
    bad = dict(body, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}})
    refused = client.post("/v1/completions", json=bad)
    assert refused.status_code == 400, refused.text


def test_a_shared_prefix_goes_to_one_replica_and_hits_its_cache(front):
    client, _, clients = front
    before = [c.calls for c in clients]
    usages = [complete(client, PREFIX + f"question {i}").json()["usage"] for i in range(3)]
    calls = [c.calls - b for c, b in zip(clients, before)]
    assert sorted(calls) == [0, 3]
    assert all(u["prompt_tokens_details"]["cached_tokens"] >= 16 for u in usages[1:])
    hits = [line for line in client.get("/metrics").text.splitlines()
            if line.startswith("llamay_route_requests_total") and 'outcome="hit"' in line]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in hits) >= 2


def test_metrics_sum_the_replicas(front, replicas):
    client, _, _ = front
    complete(client, "one for the metrics")

    def scraped() -> float:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("llamay_prompt_tokens_total "):
                return float(line.split()[1])
        return -1.0

    expected = sum(e.metrics.registry.get_sample_value("llamay_prompt_tokens_total") for e in replicas)
    deadline = time.monotonic() + 10
    while scraped() != expected:  # replica figures arrive with the next probe
        assert time.monotonic() < deadline, (scraped(), expected)
        time.sleep(0.05)
    assert expected > 0


def test_a_replica_dying_before_answering_loses_nothing(front):
    client, _, clients = front
    clients[0].fail = "before"
    before = [c.calls for c in clients]
    answers = [complete(client, f"fresh prompt {i}") for i in range(4)]
    assert [a.status_code for a in answers] == [200] * 4
    assert all(a.json()["usage"]["completion_tokens"] == 6 for a in answers)
    assert clients[0].calls > before[0]  # some went to the dying replica first, and were sent on
    assert clients[1].calls - before[1] == 4  # each answered exactly once
    assert 'llamay_replica_failures_total{replica="r0"}' in client.get("/metrics").text
    clients[0].fail = None


def test_a_replica_dying_mid_stream_ends_that_stream_with_an_error_event(front):
    client, _, clients = front
    for c in clients:
        c.fail = "after"
    events = stream_events(client, "a stream that breaks")
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "server_error" and "failed" in events[-2]["error"]["message"]
    assert complete(client, "another one that breaks").status_code == 500
    for c in clients:
        c.fail = None


def test_cluster_flags_without_ray_or_replicas_are_one_line_errors(tiny_path, monkeypatch, capsys):
    from llamay_core.cli.main import main

    assert main(["serve", "-m", str(tiny_path), "-ray-address", "127.0.0.1:6379", "-port", "0"]) == 2
    assert capsys.readouterr().err.strip() == "llamay serve: error: -ray-address needs -replicas N"
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the cluster extra were not installed
    assert main(["serve", "-m", str(tiny_path), "-replicas", "2", "-port", "0"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "llamay serve: error: -replicas needs Ray Serve: pip install 'llamay[cluster]'"
