"""One engine replica: a loaded model and its continuous-batching `Scheduler`, inside a Ray Serve replica.

The replica speaks the scheduler's own language: it receives a `JobSpec` (a `Job` without its
callback, its constraint as data, so it pickles), compiles the constraint, runs it on the local scheduler and streams the
scheduler's `Delta`/`Finished` events back, in batches: each Ray message carries every event that
was ready when it left (one when the front keeps up, several under load), so a busy replica does
not pay Ray's per-message cost once per token. Routes, validation and formatting stay in
`llamay_core/server/app.py`, which runs in the front process.

This module imports no Ray: `deploy.py` wraps the class in a Serve deployment, and the tests can
drive it in-process.
"""
from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, AsyncIterator, Callable

import attrs

from llamay_core.engine.sampling import SamplingParams
from llamay_core.server.engine_api import ConstraintSpec, EngineRejected, compile_constraint
from llamay_core.server.metrics import ServerMetrics
from llamay_core.server.scheduler import Event, Finished, Job, Scheduler, SchedulerFull, Usage


@attrs.frozen
class ReplicaConfig:
    """How each replica loads the model and schedules (the `llamay serve` flags, per replica)."""

    model: str
    backend: str | None = None
    threads: int = 1
    n_ctx: int | None = None
    kv_dtype: str = "f32"
    ubatch: int = 512
    prefix_cache_mib: float | None = 256.0
    max_running: int = 8
    max_waiting: int = 64
    prefill_chunk: int = 256
    lookup_draft_max: int = 0


@attrs.frozen
class JobSpec:
    """What crosses the wire for one request: a `Job` without its callback, its constraint as data."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    max_tokens: int
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    ignore_eos: bool = False
    adjust: Any = None  # a server LogitAdjust (logit_bias, presence/frequency penalties): plain data
    post_sampling: bool = False
    constraint: ConstraintSpec | None = None  # compiled again by the replica, on its own vocabulary

    @classmethod
    def of(cls, job: Job) -> "JobSpec":
        return cls(tuple(job.prompt_ids), job.params, job.max_tokens, stop=tuple(job.stop), logprobs=job.logprobs,
                   ignore_eos=job.ignore_eos, adjust=job.adjust, post_sampling=job.post_sampling,
                   constraint=job.constraint_spec)

    def job(self, notify: Callable[[Event], None], constraint: Any = None) -> Job:
        """The `Job` this spec describes, reporting to `notify`; `constraint` is the compiled matcher."""
        return Job(self.prompt_ids, self.params, self.max_tokens, notify, stop=self.stop, logprobs=self.logprobs,
                   ignore_eos=self.ignore_eos, constraint=constraint, adjust=self.adjust,
                   post_sampling=self.post_sampling, constraint_spec=self.constraint)


class EngineReplica:
    """A model and its scheduler; `generate` streams one request's events."""

    def __init__(self, config: ReplicaConfig) -> None:
        import llamay

        self.config = config
        self.model = llamay.load(config.model, backend=config.backend, n_ctx=config.n_ctx,
                                 kv_dtype=config.kv_dtype, n_seq=config.max_running, ubatch=config.ubatch,
                                 prefix_cache_mib=config.prefix_cache_mib or None)
        self.model.backend.set_threads(config.threads)  # Ray gives each replica `threads` CPUs
        self.metrics = ServerMetrics()
        self.scheduler = Scheduler(self.model, max_running=config.max_running, max_waiting=config.max_waiting,
                                   prefill_chunk=config.prefill_chunk, metrics=self.metrics,
                                   lookup_draft_max=config.lookup_draft_max)
        self.metrics.watch(kv_pages_used=lambda: self.model.pool.pages_in_use,
                           kv_pages_total=self.model.pool.capacity,
                           queue_depth=lambda: self.scheduler.queue_depth,
                           running=lambda: self.scheduler.n_running)
        self.metrics.watch_llama_server(self.scheduler, self.model)  # summed by the front's /metrics
        self._compile_lock = threading.Lock()  # the model's compiled-grammar cache is not thread-safe
        self.scheduler.start()

    def describe(self) -> dict[str, Any]:
        """What the front needs to present the model: name, backend, device, context and page size."""
        m = self.model
        probe = m.backend.probe()
        gpu = probe.details.get("gpu")
        return {"model_id": m.display_name, "backend": m.backend_name, "device": probe.device,
                "gpu": bool(gpu) if gpu is not None else m.backend.capabilities.device_kind == "gpu",
                "n_ctx": m.n_ctx, "page_size": m.kv_spec.page_size, "pid": os.getpid()}

    def stats(self) -> dict[str, Any]:
        """Live numbers for the front's health loop, /healthz and /metrics."""
        s = self.scheduler
        return {"alive": s.alive, "pid": os.getpid(), "queue_depth": s.queue_depth, "running": s.n_running,
                "in_flight": s.in_flight, "kv_pages_used": self.model.pool.pages_in_use,
                "kv_pages_total": self.model.pool.capacity, "metrics": self.metrics.render().decode()}

    async def generate(self, spec: JobSpec) -> AsyncIterator[list[Event]]:
        """Run `spec` on this replica's scheduler and yield its events in order, in batches.

        The first batch is the first event alone; each later batch holds every event queued since
        the previous one, so none waits for another; the last batch ends with `Finished`. A full
        scheduler yields [Finished("busy")] at once (the front answers 503); a caller that stops
        iterating (its client went away) cancels the job at the next step boundary.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def notify(event: Event) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        constraint = None
        if spec.constraint is not None:
            try:
                constraint = await asyncio.to_thread(self._compile, spec.constraint)
            except EngineRejected as exc:  # the front compiled it already: only a mismatched vocabulary gets here
                yield [Finished("error", Usage(len(spec.prompt_ids), 0, 0), str(exc))]
                return
        job = spec.job(notify, constraint)
        try:
            self.scheduler.submit(job)
        except SchedulerFull as exc:
            yield [Finished("busy", Usage(len(spec.prompt_ids), 0, 0), str(exc))]
            return
        finished = False
        first = True
        try:
            while not finished:
                batch = [await queue.get()]
                # The first event always leaves alone, whatever else the scheduler thread queued
                # meanwhile: the client's time to first token must not wait on a busy event loop.
                while not first and not queue.empty():  # nothing follows Finished, so it stays last
                    batch.append(queue.get_nowait())
                first = False
                finished = isinstance(batch[-1], Finished)
                yield batch
        finally:
            if not finished:
                self.scheduler.cancel(job)

    def _compile(self, spec: ConstraintSpec) -> Any:
        with self._compile_lock:
            return compile_constraint(self.model, spec)

    def check_health(self) -> None:
        """Ray Serve calls this periodically; raising makes it replace the replica."""
        if not self.scheduler.alive:
            raise RuntimeError("the scheduler thread has stopped")

    def __del__(self) -> None:
        # Ray Serve calls __del__ when it stops a replica gracefully (scale down, shutdown).
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            scheduler.stop()
