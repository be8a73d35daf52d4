"""ClusterScheduler behind the real routes, over in-process EngineReplicas on a tiny model (no Ray).

What Ray adds (processes, restarts) is covered by tests/e2e/test_cluster.py; here the front's
own logic runs in milliseconds: same answers as one server, prefix routing, events coalesced into
batches, and what a replica failing before or after its first event does to a request.
"""
from __future__ import annotations

import asyncio
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
from llamay_core.engine.sampling import SamplingParams
from llamay_core.server.app import create_app
from llamay_core.server.scheduler import Delta, Finished

PREFIX = "the quick brown fox jumps over the lazy dog while the cat sleeps; " * 2


class InProcessReplica:
    """A ReplicaClient calling an EngineReplica directly; `fail` makes it die before or after its first batch."""

    def __init__(self, name: str, replica: EngineReplica) -> None:
        self.name = name
        self.replica = replica
        self.fail: str | None = None
        self.calls = 0

    async def stream(self, spec: JobSpec) -> AsyncIterator[Any]:
        self.calls += 1
        if self.fail == "before":
            raise ConnectionError("the replica process died")
        async with contextlib.aclosing(self.replica.generate(spec)) as batches:
            sent = 0
            async for batch in batches:
                if self.fail == "after" and sent == 1:
                    raise ConnectionError("the replica process died")
                sent += 1
                yield batch

    async def stats(self) -> dict[str, Any]:
        # The health probe keeps answering: a replica can die between two probes, and the
        # requests routed to it in between must not be lost.
        return self.replica.stats()


class ScriptedReplica:
    """A ReplicaClient that sends fixed batches of events, then dies if `die` (a replica lost mid-request)."""

    def __init__(self, name: str, batches: list[list[Any]], die: bool) -> None:
        self.name = name
        self.batches = batches
        self.die = die
        self.calls = 0

    async def stream(self, spec: JobSpec) -> AsyncIterator[Any]:
        self.calls += 1
        for batch in self.batches:
            yield batch
        if self.die:
            raise ConnectionError("the replica process died")

    async def stats(self) -> dict[str, Any]:
        return {"alive": True, "pid": 1, "running": 0}


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


def run_replica(replica: EngineReplica, prompt: str, max_tokens: int, stall: bool) -> list[list[Any]]:
    """The batches `generate` yields; `stall` stops reading after the first one until the job is done."""
    ids = tuple(replica.model.tokenize(prompt))
    spec = JobSpec(ids, SamplingParams(temperature=0.0), max_tokens, ignore_eos=True)

    async def read() -> list[list[Any]]:
        batches = []
        async for batch in replica.generate(spec):
            batches.append(batch)
            if stall and len(batches) == 1:
                deadline = time.monotonic() + 30
                while replica.scheduler.in_flight:  # the scheduler queues the rest meanwhile
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
        return batches

    return asyncio.run(read())


def event_summary(events: list[Any]) -> list[tuple[Any, ...]]:
    # The second run takes the prompt from the prefix cache: the usage's cached tokens differ.
    return [("delta", e.text, tuple(e.tokens)) if isinstance(e, Delta)
            else ("finished", e.reason, e.usage.prompt_tokens, e.usage.completion_tokens) for e in events]


def test_events_a_slow_reader_missed_come_in_one_batch_in_order_with_finished_last(replicas):
    replica = replicas[0]
    prompt = "tell me about the lazy dog"
    eager = run_replica(replica, prompt, 8, stall=False)
    stalled = run_replica(replica, prompt, 8, stall=True)
    assert len(stalled) == 2  # the first token left alone; the other seven and Finished waited together
    assert [len(b) for b in stalled] == [1, 8]
    flat = [e for b in stalled for e in b]
    assert event_summary(flat) == event_summary([e for b in eager for e in b])
    assert [isinstance(e, Finished) for e in flat] == [False] * 8 + [True]


def record_events(replica: EngineReplica, prompt: str, max_tokens: int) -> list[Any]:
    return [e for b in run_replica(replica, prompt, max_tokens, stall=False) for e in b]


def scripted_front(tiny_path, replicas, clients) -> Any:
    scheduler = ClusterScheduler(clients, page_size=replicas[0].model.kv_spec.page_size, max_running=4,
                                 max_waiting=4, probe_interval_s=0.05)
    model = FrontModel(str(tiny_path), replicas[0].describe(), len(clients), lambda: scheduler.latest)
    return TestClient(create_app(model, scheduler=scheduler))


def test_the_front_unpacks_a_batch_in_order(tiny_path, replicas):
    events = record_events(replicas[0], "one batch for all", 6)
    with scripted_front(tiny_path, replicas, [ScriptedReplica("r0", [events], die=False)]) as client:
        streamed = stream_events(client, "one batch for all")
    texts = [c["choices"][0]["text"] for c in streamed[:-1] if c.get("choices")]
    assert "".join(texts) == "".join(e.text for e in events if isinstance(e, Delta))
    assert streamed[-2]["choices"][0]["finish_reason"] == "length" and streamed[-1] == "[DONE]"


def test_a_replica_dying_after_a_batch_relays_the_batch_then_an_error_event(tiny_path, replicas):
    events = record_events(replicas[0], "a batch then a crash", 6)
    sent = events[:3]  # three tokens arrived together, then the replica died
    dying = [ScriptedReplica(f"r{k}", [sent], die=True) for k in range(2)]
    with scripted_front(tiny_path, replicas, dying) as client:
        streamed = stream_events(client, "a batch then a crash")
    texts = [c["choices"][0]["text"] for c in streamed[:-2]]
    assert "".join(texts) == "".join(e.text for e in sent)
    assert streamed[-2]["error"]["type"] == "server_error" and "failed" in streamed[-2]["error"]["message"]
    assert streamed[-1] == "[DONE]"
    assert sum(r.calls for r in dying) == 1  # it had started: never sent again, so nothing is duplicated
