"""Continuous batching: one loop, in one thread, owns the model and steps every sequence together.

Each step is ONE forward pass (`Forward.run_many`): the next token of every sequence that is
decoding, plus prompt chunks of sequences still prefilling (at most `prefill_chunk` prompt tokens
in all, so a long prompt never stalls the others for more than one chunk). Between steps, new
requests join (taking cached prefix pages when the prefix cache has them) and finished or
cancelled ones leave, releasing their pages at once.

Batch composition never changes a request's result by construction of the engine side: each
request samples with its own seeded `Sampler`, its prompt is cut into chunks at the same places
whatever else runs, and logits of one row depend only on that row's sequence. (Whether a
backend's arithmetic is row-independent is the backend's business; see docs/performance.md.)

The HTTP side only calls `submit` and `cancel` and receives events through each job's `notify`
callback, called from this thread. A failure while serving one request (a sampler or constraint
error, a failed pass) fails the requests it touched and nothing else; only a bug in the loop
itself ends the thread, and then every request is answered with an error, `alive` turns false
and `on_fatal` lets the server exit instead of hanging.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from llamay_core.engine.forward import SequenceChunk
from llamay_core.engine.kv_pages import SequenceKV
from llamay_core.engine.sampling import Sampler, SamplingParams
from llamay_core.errors import UsageError
from llamay_core.server.metrics import ServerMetrics
from llamay_core.server.text_stream import TextStream

log = logging.getLogger("llamay.server")
LOGPROB_FLOOR = -9999.0


class SchedulerFull(Exception):
    """Too many requests in flight: the caller answers 503 with Retry-After."""


class Totals:
    """Running sums for llama-server's metrics (written by the scheduler thread only)."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.prompt_seconds = 0.0
        self.predicted_tokens = 0
        self.predicted_seconds = 0.0
        self.cached_tokens = 0
        self.busy_slots = 0  # sequences summed over steps: / steps = average batch

    def add(self, t: Timings) -> None:
        self.prompt_tokens += t.prompt_n
        self.cached_tokens += t.cache_n
        self.prompt_seconds += t.prompt_ms / 1e3
        self.predicted_tokens += t.predicted_n
        self.predicted_seconds += t.predicted_ms / 1e3


@attrs.frozen
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@attrs.frozen
class TokenLogprob:
    """The chosen token's log-probability and the most likely alternatives (text, bytes, logprob)."""

    token: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]]
    top_ids: list[int] = attrs.field(factory=list)


@attrs.frozen
class Delta:
    """New text for a request (possibly empty when only logprobs arrived), and the tokens sampled."""

    text: str
    logprobs: list[TokenLogprob]
    tokens: list[int] = attrs.field(factory=list)


@attrs.frozen
class Timings:
    """llama-server's `timings`: prompt tokens computed (not cached) and generated, with their time."""

    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    cache_n: int = 0


@attrs.frozen
class Finished:
    """The end of a request. reason: stop, length, cancelled or error; stop_type: eos, word, limit
    (llama-server's names) or none."""

    reason: str
    usage: Usage
    error: str = ""
    stop_type: str = "none"
    stop_word: str = ""
    timings: Timings = attrs.field(factory=Timings)
    truncated: bool = False  # stopped because the context was full (llama-server's `truncated`)
    client_error: bool = False  # an error the request caused (its grammar's limits): a 400, not a 500


Event = Delta | Finished


class Job:
    """One request as the scheduler sees it. Only the scheduler thread touches its state."""

    def __init__(self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int,
                 notify: Callable[[Event], None], stop: Sequence[str] = (), logprobs: int | None = None,
                 ignore_eos: bool = False, constraint: Any = None, adjust: Any = None,
                 post_sampling: bool = False, constraint_spec: Any = None) -> None:
        self.prompt_ids = list(prompt_ids)
        self.constraint = constraint  # a llamay_core.constrain Constraint: masks each step's logits
        # The constraint as data (engine_api.ConstraintSpec): what a remote replica compiles again.
        self.constraint_spec = constraint_spec
        self.adjust = adjust  # a LogitAdjust (logit_bias, presence/frequency penalties) or None
        self.post_sampling = post_sampling  # logprobs from the sampler's final distribution
        self.params = params
        self.max_tokens = max_tokens
        self.notify = notify
        self.stop = tuple(stop)
        self.logprobs = logprobs
        self.ignore_eos = ignore_eos
        self.cancelled = False  # set from the HTTP side; read by the scheduler between steps
        self.submitted_at = time.perf_counter()
        self.admitted_at = 0.0
        self.first_token_at = 0.0
        # Set when the job joins the batch:
        self.seq: SequenceKV | None = None
        self.sampler: Sampler | None = None
        self.text: TextStream | None = None
        self.cached_tokens = 0
        self.prompt_pos = 0  # prompt tokens whose KV is computed (or taken from the cache)
        self.kv_tokens: list[int] = []  # the tokens whose KV the sequence holds, for the prefix cache
        self.history: list[int] = []  # prompt + generated, for the repetition penalty
        self.generated = 0
        self.next_input = -1
        self.drafter: Any = None  # an n-gram drafter when the server speculates
        self.drafts: list[int] = []
        self.done = False
        self.stop_type = "none"
        self.truncated = False

    @property
    def prefilling(self) -> bool:
        return self.prompt_pos < len(self.prompt_ids)


class Scheduler:
    """The continuous-batching loop. `start()` runs it in a background thread."""

    def __init__(self, model: Any, *, max_running: int = 8, max_waiting: int = 64, prefill_chunk: int = 256,
                 metrics: ServerMetrics | None = None, lookup_draft_max: int = 0,
                 on_fatal: Callable[[], None] | None = None) -> None:
        if max_running < 1:
            raise UsageError(f"concurrency must be >= 1, got {max_running}")
        self.model = model
        self.max_running = max_running
        self.max_waiting = max(0, max_waiting)
        # A step whose tokens exceed one pass (many sequences, small -batch) runs as several passes.
        self.prefill_chunk = max(1, min(prefill_chunk, model.forward.ubatch))
        self.on_fatal = on_fatal
        self.failure = ""  # why the loop died, once it has
        self.totals = Totals()
        self.metrics = metrics or ServerMetrics()
        # Prompt lookup (-lookup): each decoding sequence may bring up to this many drafted
        # tokens to a step; they are verified in the same pass (0 = off).
        self.lookup_draft_max = lookup_draft_max
        self.drafted = self.accepted = 0
        self.eog = frozenset(model.tokenizer.eog_ids)
        self._lock = threading.Lock()
        self._inbox: deque[Job] = deque()
        self._in_flight = 0
        self._wake = threading.Event()
        self._stopping = False
        self._abort = False
        self._thread: threading.Thread | None = None
        # Scheduler-thread state:
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self.n_running = 0
        self.steps = 0

    # -- the HTTP side ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="llamay-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Finish the jobs already submitted (for at most `timeout` seconds, then cancel the rest),
        then end the thread."""
        self._stopping = True
        self._wake.set()
        if self._thread is None:
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abort = True
            self._wake.set()
            self._thread.join(5.0)

    def submit(self, job: Job) -> None:
        """Queue `job`; raises SchedulerFull when running + waiting requests are at the limit."""
        with self._lock:
            if self._stopping or self.failure:
                raise SchedulerFull("the server is shutting down" if self._stopping else "the scheduler has stopped")
            limit = self.max_running + self.max_waiting
            if self._in_flight >= limit:
                raise SchedulerFull(f"{self._in_flight} requests in flight (limit {limit})")
            self._in_flight += 1
            self._inbox.append(job)
        self._wake.set()

    def cancel(self, job: Job) -> None:
        """Drop `job` at the next step boundary and free its pages (client went away)."""
        job.cancelled = True
        self._wake.set()

    @property
    def in_flight(self) -> int:
        """Requests accepted and not finished (waiting or running)."""
        with self._lock:
            return self._in_flight

    @property
    def queue_depth(self) -> int:
        """Requests accepted but not yet in the batch."""
        with self._lock:
            return max(0, self._in_flight - self.n_running)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                self._wake.clear()
                self._take_new()
                if self._abort:
                    for job in list(self._running) + list(self._waiting):
                        job.cancelled = True
                self._drop_cancelled()
                self._admit()
                if self._running:
                    self._step()
                elif self._stopping and not self._waiting:
                    return
                else:
                    self._wake.wait(0.5)
        except Exception as exc:
            log.exception("the scheduler loop failed; failing every request in flight")
            self.failure = f"{type(exc).__name__}: {exc}"
            self._take_new()
            for job in list(self._running) + list(self._waiting):
                with contextlib.suppress(Exception):
                    self._finish(job, "error", "internal error in the scheduler")
            if self.on_fatal is not None:
                self.on_fatal()

    def _take_new(self) -> None:
        with self._lock:
            while self._inbox:
                self._waiting.append(self._inbox.popleft())

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._waiting if j.cancelled]:
            self._waiting.remove(job)
            self._finish(job, "cancelled")
        for job in [j for j in self._running if j.cancelled]:
            self._finish(job, "cancelled")

    def _admit(self) -> None:
        model = self.model
        while self._waiting and len(self._running) < self.max_running:
            job = self._waiting.popleft()
            job.admitted_at = time.perf_counter()
            self.metrics.queue_seconds.observe(job.admitted_at - job.submitted_at)
            self._running.append(job)
            try:
                job.seq = SequenceKV(model.pool)
                if model.prefix_cache is not None:
                    job.cached_tokens = model.prefix_cache.attach(job.seq, job.prompt_ids)
                job.prompt_pos = job.cached_tokens
                job.kv_tokens = job.prompt_ids[:job.cached_tokens]
                job.history = list(job.prompt_ids)
                job.sampler = Sampler(job.params)
                job.text = TextStream(model.tokenizer, job.stop)
                if self.lookup_draft_max and job.logprobs is None and job.constraint is None and job.adjust is None:
                    from llamay_core.speculative.ngram import NgramDrafter

                    job.drafter = NgramDrafter()
                room = model.n_ctx - len(job.prompt_ids)
                job.truncated = job.max_tokens > room  # the context, not the request, sets the limit
                job.max_tokens = max(1, min(job.max_tokens, room))
            except Exception as exc:
                self._fail(job, exc)
        self.n_running = len(self._running)

    def _fail(self, job: Job, exc: Exception) -> None:
        """One request's failure: it ends with an error event; the others go on."""
        if isinstance(exc, UsageError):  # the request's own input: no traceback for the server's log
            log.warning("request failed: %s", exc)
            self._finish(job, "error", str(exc), client_error=True)
            return
        log.exception("request failed")
        self._finish(job, "error", f"{type(exc).__name__}: {exc}")

    def _plan(self) -> tuple[list[Job], list[SequenceChunk]]:
        """This step's work: every decoding sequence's next token, then prompt chunks in arrival order."""
        jobs = [j for j in self._running if not j.prefilling]
        chunks = []
        for j in jobs:
            j.drafts = self._drafts(j)
            chunks.append(SequenceChunk(j.seq, [j.next_input] + j.drafts, all_logits=bool(j.drafts)))
        budget = self.prefill_chunk
        for job in self._running:
            if not job.prefilling:
                continue
            # A prompt is cut at fixed places (every prefill_chunk tokens), whatever else runs.
            n = min(self.prefill_chunk, len(job.prompt_ids) - job.prompt_pos)
            if n > budget:
                continue
            budget -= n
            jobs.append(job)
            chunks.append(SequenceChunk(job.seq, job.prompt_ids[job.prompt_pos:job.prompt_pos + n]))
        return jobs, chunks

    def _passes(self, jobs: list[Job], chunks: list[SequenceChunk]) -> list[tuple[list[Job], list[SequenceChunk]]]:
        """The step cut into passes of at most `ubatch` tokens (one pass unless -batch is small)."""
        limit = self.model.forward.ubatch
        passes: list[tuple[list[Job], list[SequenceChunk]]] = [([], [])]
        size = 0
        for job, chunk in zip(jobs, chunks):
            if passes[-1][0] and size + len(chunk.tokens) > limit:
                passes.append(([], []))
                size = 0
            passes[-1][0].append(job)
            passes[-1][1].append(chunk)
            size += len(chunk.tokens)
        return passes

    def _step(self) -> None:
        jobs, chunks = self._plan()
        if not jobs:
            return
        t0 = time.perf_counter()
        for pass_jobs, pass_chunks in self._passes(jobs, chunks):
            self._run_pass(pass_jobs, pass_chunks)
        self.steps += 1
        self.totals.busy_slots += len(jobs)
        self.metrics.step_seconds.observe(time.perf_counter() - t0)
        self.metrics.batch_size.observe(len(jobs))

    def _run_pass(self, jobs: list[Job], chunks: list[SequenceChunk]) -> None:
        try:
            logits = self.model.forward.run_many(chunks)
        except Exception as exc:  # one bad pass fails its requests, not the server
            log.exception("forward pass failed")
            for job in jobs:
                self._finish(job, "error", f"{type(exc).__name__}: {exc}")
            return
        cache = self.model.prefix_cache
        for job, chunk, out in zip(jobs, chunks, logits):
            if job.done:
                continue
            try:
                job.kv_tokens.extend(chunk.tokens)
                if job.prefilling:
                    job.prompt_pos += len(chunk.tokens)
                elif job.drafts:
                    self._verify(job, out)
                    continue
                if cache is not None:
                    cache.insert(job.seq, job.kv_tokens)
                if not job.prefilling:
                    self._sample(job, out[-1])
            except Exception as exc:
                self._fail(job, exc)

    def _drafts(self, job: Job) -> list[int]:
        if job.drafter is None:
            return []
        room = min(self.lookup_draft_max, job.max_tokens - job.generated - 1,
                   self.model.n_ctx - job.seq.length - 1, self.model.forward.ubatch // (2 * self.max_running))
        return job.drafter.propose(job.history, room) if room > 0 else []

    def _verify(self, job: Job, rows: np.ndarray) -> None:
        """Sample row by row; a draft is kept while it equals the token sampled at its position.

        Each emitted token is drawn from the target's own distribution with the request's RNG,
        exactly as plain decoding draws it, so drafting changes speed, never the output.
        """
        base = job.seq.length - len(job.drafts) - 1  # KV length before this step's tokens
        accepted = 0
        for i, row in enumerate(rows):
            self._sample(job, row)
            if job.seq is None or i >= len(job.drafts) or job.next_input != job.drafts[i]:
                break
            accepted += 1
        self.drafted += len(job.drafts)
        self.accepted += accepted
        if job.seq is not None:  # still running: drop the KV of rejected drafts
            job.seq.truncate(base + 1 + accepted)
            del job.kv_tokens[base + 1 + accepted:]
            if self.model.prefix_cache is not None:
                self.model.prefix_cache.insert(job.seq, job.kv_tokens)

    def _sample(self, job: Job, logits: np.ndarray) -> None:
        now = time.perf_counter()
        if not job.first_token_at:
            job.first_token_at = now
            self.metrics.prefill_seconds.observe(now - job.admitted_at)
        if job.adjust is not None:
            logits = job.adjust(logits, job.history[len(job.prompt_ids):])
        if job.constraint is not None:
            logits = job.constraint.mask_logits(logits)
        token = job.sampler.sample(logits, job.history)
        job.history.append(token)
        job.generated += 1
        if token in self.eog and not job.ignore_eos:
            job.stop_type = "eos"
            self._emit(job, job.text.finish(), [], [])  # the end-of-generation token is not output
            self._finish(job, "stop")
            return
        if job.constraint is not None:
            job.constraint.advance(token)
        logprobs = [self._logprob(logits, token, job)] if job.logprobs is not None else []
        text = job.text.push(token)
        if job.text.stopped or (job.constraint is not None and job.constraint.finished):
            job.stop_type = "word" if job.text.stopped else "eos"
            self._emit(job, text + ("" if job.text.stopped else job.text.finish()), logprobs, [token])
            self._finish(job, "stop")
        elif job.generated >= job.max_tokens:
            job.stop_type = "limit"
            self._emit(job, text + job.text.finish(), logprobs, [token])
            self._finish(job, "length")
        else:
            self._emit(job, text, logprobs, [token])
            job.next_input = token

    def _logprob(self, logits: np.ndarray, token: int, job: Job) -> TokenLogprob:
        n_top = job.logprobs
        if job.post_sampling:
            with np.errstate(divide="ignore"):
                lp = np.log(job.sampler.probabilities(logits, job.history[:-1]))
        else:
            z = logits.astype(np.float64)
            top = z.max()
            lp = z - (top + np.log(np.exp(z - top).sum()))
        # Banned or masked tokens have -inf; JSON has no infinity (nor NaN), so they read as OpenAI's floor.
        lp = np.nan_to_num(np.maximum(lp, LOGPROB_FLOOR), nan=LOGPROB_FLOOR, posinf=0.0)
        alternatives, ids = [], []
        if n_top:
            best = np.argpartition(-lp, n_top - 1)[:n_top]
            for t in best[np.argsort(-lp[best], kind="stable")]:
                alternatives.append((*self._token_text(int(t)), float(lp[t])))
                ids.append(int(t))
        return TokenLogprob(*self._token_text(token), float(lp[token]), alternatives, ids)

    def _token_text(self, token: int) -> tuple[str, list[int]]:
        raw = self.model.tokenizer.token_bytes(token)
        return raw.decode("utf-8", errors="replace"), list(raw)

    def _emit(self, job: Job, text: str, logprobs: list[TokenLogprob], tokens: list[int]) -> None:
        job.notify(Delta(text, logprobs, tokens))

    def _finish(self, job: Job, reason: str, error: str = "", client_error: bool = False) -> None:
        """Take `job` out of the batch, free its pages at once, account for it and tell the client."""
        if job.done:
            return
        job.done = True
        now = time.perf_counter()
        if job in self._running:
            self._running.remove(job)
            self.n_running = len(self._running)
        if job.seq is not None:
            job.seq.release()
            job.seq = None
        m = self.metrics
        m.prompt_tokens.inc(len(job.prompt_ids))
        m.cached_tokens.inc(job.cached_tokens)
        m.generated_tokens.inc(job.generated)
        if job.first_token_at:
            m.decode_seconds.observe(now - job.first_token_at)
        with self._lock:
            self._in_flight -= 1
        usage = Usage(prompt_tokens=len(job.prompt_ids), completion_tokens=job.generated,
                      cached_tokens=job.cached_tokens)
        prompt_end = job.first_token_at or now
        timings = Timings(prompt_n=max(0, job.prompt_pos - job.cached_tokens),
                          prompt_ms=(prompt_end - job.admitted_at) * 1e3 if job.admitted_at else 0.0,
                          predicted_n=job.generated,
                          predicted_ms=(now - job.first_token_at) * 1e3 if job.first_token_at else 0.0,
                          cache_n=job.cached_tokens)
        self.totals.add(timings)
        job.notify(Finished(reason, usage, error, job.stop_type, job.text.stop_word if job.text else "", timings,
                            truncated=job.truncated and job.stop_type == "limit", client_error=client_error))
