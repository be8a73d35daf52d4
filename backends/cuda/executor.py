"""Running a plan: stage the batch, launch (or replay) the kernels, copy the logits back, time it.

A pass with at most GRAPH_MAX_TOKENS tokens (decode, small batches) is a fixed list of launches
whose pointers never change and whose lengths are read on the device, so after one eager run it is
captured as a CUDA graph and every later step of that shape costs one graph launch.
"""
from __future__ import annotations

from typing import Any, Callable

import attrs
import numpy as np

from llamay_core.backend_api import Batch
from llamay_core.errors import BackendError
from llamay_backends.cuda import plan as P
from llamay_backends.cuda.page_store import CudaPageStore
from llamay_backends.cuda.staging import StagingArea
from llamay_backends.cuda.weights import DeviceWeights

GRAPH_MAX_TOKENS = 16
INITIAL_SEQS = 8


class GraphReplay:
    """Capture control flow: per shape key, `eager_runs` plain runs, then capture once, then replay.

    If capturing fails (an old driver, a launch CuPy cannot capture) the reason is kept and every
    later run is eager: slower, still correct.
    """

    def __init__(self, stream: Any, eager_runs: int = 1) -> None:
        self.stream = stream
        self.eager_runs = eager_runs
        self.graphs: dict[Any, Any] = {}
        self.seen: dict[Any, int] = {}
        self.failure = ""
        self.counts = {"eager": 0, "captured": 0, "replayed": 0}

    def run(self, key: Any, launch_all: Callable[[], None]) -> str:
        graph = self.graphs.get(key)
        if graph is not None:
            graph.launch(self.stream)
            return self._count("replayed")
        if self.failure or self.seen.get(key, 0) < self.eager_runs:
            self.seen[key] = self.seen.get(key, 0) + 1
            launch_all()
            return self._count("eager")
        try:
            self.stream.begin_capture()
            try:
                launch_all()
            finally:
                graph = self.stream.end_capture()
        except Exception as exc:  # capture launches nothing, so run the pass for real
            self.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
            launch_all()
            return self._count("eager")
        self.graphs[key] = graph
        graph.launch(self.stream)
        return self._count("captured")

    def invalidate(self) -> None:
        """Forget every graph: the buffers they point at are being replaced."""
        self.graphs.clear()
        self.seen.clear()

    def _count(self, what: str) -> str:
        self.counts[what] += 1
        return what


@attrs.define
class GpuTimes:
    """Device time summed over passes, measured with events on the stream."""

    staging: float = 0.0
    kernels: float = 0.0
    copy_back: float = 0.0
    passes: int = 0


class CudaExecutable:
    def __init__(self, plan: P.Plan, weights: DeviceWeights, store: CudaPageStore, runtime: Any,
                 max_tokens: int, use_graphs: bool = True, tiled_matmul: bool = True) -> None:
        self.plan, self.weights, self.store, self.rt = plan, weights, store, runtime
        self.max_tokens = max_tokens
        self.tiled_matmul = tiled_matmul
        xp = runtime.xp
        self.buffers = [xp.zeros(n, np.float32) for n in plan.buffer_elements(max_tokens)]
        self.staging = StagingArea(xp, max_tokens, INITIAL_SEQS, store.spec.max_pages)
        self.replay = GraphReplay(runtime.stream) if use_graphs else None
        self.times = GpuTimes()
        self._events = [runtime.event() for _ in range(4)]
        self._bound: dict[tuple[int, int], list[tuple[Any, tuple, tuple, tuple]]] = {}
        self.launches_per_pass: dict[tuple[int, int], int] = {}

    def __call__(self, batch: Batch) -> np.ndarray:
        rt, ev = self.rt, self._events
        t, r = batch.n_tokens, len(batch.logit_rows)
        if not self.staging.fits(batch):
            self._regrow(len(batch.page_tables))
        n_ints = self.staging.pack(batch)
        key = (t, r)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = self.bind(self.launch_list(t, r))
            self.launches_per_pass[key] = len(bound)
        rt.record(ev[0])
        rt.upload(self.staging.device[:n_ints], self.staging.host[:n_ints])
        rt.record(ev[1])
        with rt.stream:
            if self.replay is not None and t <= GRAPH_MAX_TOKENS:
                self.replay.run(key, lambda: self._launch_all(bound))
            else:
                self._launch_all(bound)
        rt.record(ev[2])
        logits = rt.to_host(self.buffers[self.plan.output][:r * self.plan.n_vocab]).reshape(r, self.plan.n_vocab)
        rt.record(ev[3])
        self.times.staging += rt.elapsed(ev[0], ev[1])
        self.times.kernels += rt.elapsed(ev[1], ev[2])
        self.times.copy_back += rt.elapsed(ev[2], ev[3])
        self.times.passes += 1
        return logits

    def launch_list(self, n_tokens: int, n_rows: int) -> list[P.Launch]:
        launches = self.plan.launches(n_tokens, n_rows, tiled=self.tiled_matmul)
        for launch in launches:
            if launch.writes is not None:
                index, elements = launch.writes
                if elements > len(self.buffers[index]):
                    raise BackendError(f"cuda: {launch.kernel} writes {elements} values into a buffer of "
                                       f"{len(self.buffers[index])}")
        return launches

    def bind(self, launches: list[P.Launch]) -> list[tuple[Any, tuple, tuple, tuple]]:
        """Resolve symbolic arguments to device arrays and typed scalars, once per shape."""
        return [(self.rt.function(l.kernel), l.grid, l.block, tuple(self._arg(a) for a in l.args)) for l in launches]

    def _arg(self, a: P.Arg) -> Any:
        if isinstance(a, P.Buf):
            return self.buffers[a.index]
        if isinstance(a, P.Weight):
            return self.weights[a.name].data if a.name else self.rt.null_pointer()
        if isinstance(a, P.Staged):
            return self.staging.views[a.name]
        if isinstance(a, P.Pages):
            return self.store.pages
        if isinstance(a, P.I32):
            return np.int32(a.value)
        if isinstance(a, P.I64):
            return np.int64(a.value)
        if isinstance(a, P.F32):
            return np.float32(a.value)
        raise TypeError(f"unknown kernel argument {a!r}")

    def _launch_all(self, bound: list[tuple[Any, tuple, tuple, tuple]]) -> None:
        launch = self.rt.launch
        for fn, grid, block, args in bound:
            launch(fn, grid, block, args)

    def _regrow(self, n_seqs: int) -> None:
        """More sequences than the staging block holds: a bigger block, so every binding and graph goes."""
        seqs = max(n_seqs, 2 * self.staging.max_seqs)
        self.staging = StagingArea(self.rt.xp, self.max_tokens, seqs, self.store.spec.max_pages)
        self._bound.clear()
        if self.replay is not None:
            self.replay.invalidate()
