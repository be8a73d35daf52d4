"""`ClusterScheduler`: the HTTP side of `server.scheduler.Scheduler`, backed by remote replicas.

`server/app.py` talks to its scheduler through a small surface, and this class offers exactly
that surface, so the same routes serve one machine or a cluster:

    start()                 on the event loop, at app startup
    stop()                  in a worker thread, at app shutdown: drain every accepted request
    submit(job)             on the event loop; raises SchedulerFull (-> 503); events reach job.notify
    cancel(job)             on the event loop (client went away); the job ends with Finished("cancelled")
    alive, queue_depth, n_running, in_flight, metrics

Each submitted `Job` becomes a relay task: the router picks a replica, the replica streams the
job's `Delta`/`Finished` events back in batches (all that were ready at once, see `replica.py`),
and the task hands them to `job.notify` one by one, in order. A replica that fails before the
job's first event is marked down and the job goes to another replica (nothing reached the
client, so nothing is duplicated); one that fails after it ends the job, once every event it
did send is relayed, with Finished("error"), which the routes turn into an SSE error event or a
500.

Replicas are reached through `ReplicaClient`s (`deploy.py` makes them from Ray Serve handles;
tests may wrap in-process `EngineReplica`s).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, AsyncIterator, Protocol, Sequence

from llamay_core.cluster.cluster_metrics import ClusterMetrics
from llamay_core.cluster.replica import JobSpec
from llamay_core.cluster.routing import PrefixRouter, Route
from llamay_core.server.scheduler import Delta, Finished, Job, SchedulerFull, Usage

log = logging.getLogger("llamay.cluster")


class ReplicaClient(Protocol):
    """How the front reaches one replica."""

    name: str

    def stream(self, spec: JobSpec) -> AsyncIterator[Sequence[Delta | Finished]]:
        """The replica's events for `spec`, in order, in batches (`EngineReplica.generate`);
        closing the iterator cancels the job there."""

    async def stats(self) -> dict[str, Any]:
        """`EngineReplica.stats()`; raises when the replica cannot answer."""


class ClusterScheduler:
    """Routes jobs to replicas by prefix and relays their events (see the module docstring)."""

    def __init__(self, replicas: Sequence[ReplicaClient], *, page_size: int, max_running: int = 8,
                 max_waiting: int = 64, probe_interval_s: float = 1.0, probe_timeout_s: float = 5.0) -> None:
        self.replicas = list(replicas)
        n = len(self.replicas)
        self.router = PrefixRouter(n, page_size=page_size, saturation=max_running)
        self.limit = n * (max_running + max_waiting)
        self.max_running = n * max_running  # slots over all replicas (/slots, /props)
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.up = [True] * n
        self.load = [0] * n  # jobs this front has in flight on each replica
        self.latest: list[dict[str, Any]] = [{} for _ in range(n)]
        self.pids: list[int | None] = [None] * n
        self.metrics = ClusterMetrics([r.name for r in self.replicas], lambda: self.latest)
        self._tasks: dict[Job, asyncio.Task[None]] = {}
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._prober: asyncio.Task[None] | None = None

    # -- the surface app.py uses ----------------------------------------------------------------
    def start(self) -> None:
        self._prober = asyncio.get_running_loop().create_task(self._probe_loop())

    def stop(self, timeout: float | None = 60.0) -> None:
        """Refuse new jobs and wait until every accepted one has finished (called off the loop)."""
        self._stopping = True
        self._idle.wait(timeout)
        if self._prober is not None:
            self._prober.get_loop().call_soon_threadsafe(self._prober.cancel)

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise SchedulerFull("the server is shutting down")
        if len(self._tasks) >= self.limit:
            raise SchedulerFull(f"{len(self._tasks)} requests in flight (limit {self.limit})")
        self._idle.clear()
        task = asyncio.get_running_loop().create_task(self._relay(job))
        self._tasks[job] = task
        task.add_done_callback(lambda _: self._done(job))

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        task = self._tasks.get(job)
        if task is not None:
            task.cancel()

    @property
    def alive(self) -> bool:
        return any(self.up)

    @property
    def failure(self) -> str:
        """Why the server cannot serve, when no replica is up (what /health reports)."""
        return "" if any(self.up) else "no replica answers its health probe"

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def queue_depth(self) -> int:
        """Accepted requests not yet decoding on a replica (as of the last probe)."""
        return max(0, self.in_flight - self.n_running)

    @property
    def n_running(self) -> int:
        return sum(s.get("running", 0) for s, up in zip(self.latest, self.up) if up)

    # -- relaying -------------------------------------------------------------------------------
    def _done(self, job: Job) -> None:
        self._tasks.pop(job, None)
        if not self._tasks:
            self._idle.set()

    async def _relay(self, job: Job) -> None:
        spec = JobSpec.of(job)
        tried: set[int] = set()
        relayed = 0  # Delta events passed on (what the usage of a cut-short request can report)
        while True:
            untried = [k not in tried for k in range(len(self.replicas))]
            up = [u and fresh for u, fresh in zip(self.up, untried)]
            # No untried replica is up: try one that is down (Ray queues the call until it restarts).
            route = self.router.choose(spec.prompt_ids, self.load, up if any(up) else untried)
            tried.add(route.replica)
            self.router.record(route)
            self.metrics.routed(self.replicas[route.replica].name, route.outcome)
            started = False
            self.load[route.replica] += 1
            try:
                async for batch in self.replicas[route.replica].stream(spec):
                    for event in batch:
                        if isinstance(event, Finished) and event.reason == "busy" and not started:
                            raise ReplicaBusy(event.error)
                        started = True
                        if isinstance(event, Delta):
                            relayed += 1
                        job.notify(event)
                        if isinstance(event, Finished):
                            return
                raise RuntimeError("the replica closed the stream without finishing the request")
            except asyncio.CancelledError:
                job.notify(Finished("cancelled", Usage(len(spec.prompt_ids), relayed, 0)))
                return
            except Exception as exc:  # a dead or failing replica: Ray raises many kinds
                self._failed(route, exc)
                if started or len(tried) >= len(self.replicas) or self._stopping:
                    job.notify(Finished("error", Usage(len(spec.prompt_ids), relayed, 0),
                                        f"replica {self.replicas[route.replica].name} failed: {_one_line(exc)}"))
                    return
                log.warning("replica %s failed before answering; sending the request elsewhere: %s",
                            self.replicas[route.replica].name, _one_line(exc))
            finally:
                self.load[route.replica] -= 1

    def _failed(self, route: Route, exc: Exception) -> None:
        if isinstance(exc, ReplicaBusy):
            return
        self.up[route.replica] = False
        self.router.forget(route.replica)
        self.metrics.replica_failed(self.replicas[route.replica].name)

    # -- health ---------------------------------------------------------------------------------
    async def _probe_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(k) for k in range(len(self.replicas))))
            await asyncio.sleep(self.probe_interval_s)

    async def _probe(self, k: int) -> None:
        try:
            stats = await asyncio.wait_for(self.replicas[k].stats(), self.probe_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.up[k] = False
            self.latest[k] = {**self.latest[k], "alive": False}
            return
        if self.pids[k] is not None and stats["pid"] != self.pids[k]:
            self.router.forget(k)  # a restarted replica holds no prefix yet
        self.pids[k] = stats["pid"]
        self.latest[k] = stats
        self.up[k] = bool(stats["alive"])


class ReplicaBusy(Exception):
    """The replica's own scheduler was full (another front filled it): try another one."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
