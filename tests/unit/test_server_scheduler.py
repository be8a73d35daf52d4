"""The continuous-batching scheduler without HTTP: chunked prefill, equality with `generate`, cancellation."""
from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

import llamay
from llamay_core.engine.sampling import SamplingParams
from llamay_core.server.scheduler import Delta, Finished, Job, Scheduler, SchedulerFull
from llamay_core.server.text_stream import TextStream


@pytest.fixture()
def flat_model(tmp_path):
    from tests.support.tiny_gguf import write_tiny_llama

    path = write_tiny_llama(tmp_path / "flat.gguf", tied=False)
    return llamay.load(path, backend="reference", n_ctx=256, n_seq=4)


class Collector:
    """A job's events, gathered from the scheduler thread."""

    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()

    def notify(self, event: Any) -> None:
        self.events.put(event)

    def result(self, timeout: float = 30) -> tuple[str, Finished]:
        text = []
        while True:
            event = self.events.get(timeout=timeout)
            if isinstance(event, Finished):
                return "".join(text), event
            assert isinstance(event, Delta)
            text.append(event.text)


def submit(scheduler: Scheduler, prompt: list[int], max_tokens: int, **params: Any) -> Collector:
    out = Collector()
    scheduler.submit(Job(prompt, SamplingParams(**params), max_tokens, out.notify))
    return out


@pytest.mark.parametrize("params", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 5, "top_k": 50}])
def test_scheduler_output_equals_generate(flat_model, params):
    prompts = [flat_model.tokenize("a" * n) for n in (3, 40, 90)]
    expected = [flat_model.generate(p, max_tokens=20, **params) for p in prompts]
    scheduler = Scheduler(flat_model, max_running=3, prefill_chunk=16)
    scheduler.start()
    try:
        outs = [submit(scheduler, p, 20, **params) for p in prompts]
        results = [o.result() for o in outs]
    finally:
        scheduler.stop()
    assert [text for text, _ in results] == expected
    assert all(f.usage.prompt_tokens == len(p) for (_, f), p in zip(results, prompts))


def test_long_prompt_is_fed_in_chunks_beside_decoding(flat_model):
    passes: list[list[int]] = []
    original = flat_model.forward.run_many

    def recording(chunks, *args, **kwargs):
        passes.append([len(c.tokens) for c in chunks])
        return original(chunks, *args, **kwargs)

    flat_model.forward.run_many = recording
    scheduler = Scheduler(flat_model, max_running=2, prefill_chunk=16)
    gate = threading.Event()
    first = Collector()

    def notify_first(event: Any) -> None:
        first.notify(event)
        gate.set()

    scheduler.start()
    try:
        scheduler.submit(Job(flat_model.tokenize("short"), SamplingParams(), 60, notify_first, ignore_eos=True))
        gate.wait(10)  # the short one is decoding
        long_prompt = flat_model.tokenize("b" * 150)
        second = submit(scheduler, long_prompt, 2)
        second.result()
        first.result()
    finally:
        scheduler.stop()
        del flat_model.forward.run_many
    assert passes[0] == [len(flat_model.tokenize("short"))]
    prefill_passes = [p for p in passes[1:] if any(n > 1 for n in p)]
    assert len(prefill_passes) >= len(long_prompt) // 16
    # every pass that fed the long prompt also decoded the short one, and fed at most 16 prompt tokens
    assert all(len(p) == 2 and sorted(p)[0] == 1 and sorted(p)[1] <= 16 for p in prefill_passes)


def test_cancel_frees_pages_and_queue_limit(flat_model):
    scheduler = Scheduler(flat_model, max_running=1, max_waiting=1, prefill_chunk=16)
    slow = threading.Event()
    original = flat_model.forward.run_many

    def gated(*args, **kwargs):
        slow.wait(10)
        return original(*args, **kwargs)

    flat_model.forward.run_many = gated
    scheduler.start()
    try:
        running = Job(flat_model.tokenize("one"), SamplingParams(), 100, Collector().notify, ignore_eos=True)
        waiting_out = Collector()
        waiting = Job(flat_model.tokenize("two"), SamplingParams(), 100, waiting_out.notify)
        scheduler.submit(running)
        scheduler.submit(waiting)
        with pytest.raises(SchedulerFull):
            scheduler.submit(Job([1], SamplingParams(), 1, Collector().notify))
        scheduler.cancel(running)
        scheduler.cancel(waiting)
        slow.set()
        assert waiting_out.result()[1].reason == "cancelled"
        for _ in range(200):
            if scheduler.in_flight == 0:
                break
            threading.Event().wait(0.01)
        assert scheduler.in_flight == 0 and scheduler.n_running == 0
        assert flat_model.pool.pages_in_use == 0
    finally:
        slow.set()
        scheduler.stop()
        del flat_model.forward.run_many


class FakeTokenizer:
    """Token i is the i-th character of a fixed string."""

    text = "hello world, stop here"

    def token_bytes(self, token_id: int, special: bool = True) -> bytes:
        return self.text[token_id].encode()


def test_text_stream_holds_back_a_possible_stop_string():
    stream = TextStream(FakeTokenizer(), stop=["stop"])
    shown = "".join(stream.push(i) for i in range(len(FakeTokenizer.text)))
    assert shown == "hello world, " and stream.stopped
    plain = TextStream(FakeTokenizer(), stop=["zzz"])
    shown = "".join(plain.push(i) for i in range(5)) + plain.finish()
    assert shown == "hello"


def test_prompt_lookup_in_the_scheduler_changes_nothing_but_speed(tiny_model_path):
    """Greedy and seeded requests give the same tokens with and without n-gram drafting."""
    import llamay
    from llamay_core.engine.sampling import SamplingParams
    from llamay_core.server.scheduler import Delta, Finished, Job, Scheduler

    prompt = [5, 70, 80, 90, 100, 33, 12] * 4
    outputs = {}
    for draft_max in (0, 6):
        m = llamay.load(tiny_model_path, backend="reference", n_ctx=256, n_seq=4)
        sched = Scheduler(m, max_running=3, prefill_chunk=16, lookup_draft_max=draft_max)
        results = {}
        jobs = []
        for i, params in enumerate([SamplingParams(), SamplingParams(temperature=0.9, seed=11)]):
            texts = []
            job = Job(prompt, params, 24, lambda e, texts=texts: texts.append(e), ignore_eos=True)
            jobs.append((i, job, texts))
            sched.submit(job)
        sched.start()
        deadline = __import__("time").monotonic() + 120
        while any(not any(isinstance(e, Finished) for e in t) for _, _, t in jobs):
            assert __import__("time").monotonic() < deadline
            __import__("time").sleep(0.05)
        sched.stop()
        for i, _, texts in jobs:
            results[i] = "".join(e.text for e in texts if isinstance(e, Delta))
        outputs[draft_max] = (results, sched.drafted, sched.accepted, m.pool.pages_in_use)
    assert outputs[0][0] == outputs[6][0]
    assert outputs[6][1] > 0
    assert outputs[6][3] == outputs[0][3]
