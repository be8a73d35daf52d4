"""Where the cuda backend's passes spend device time, kernel by kernel.

    python benchmarks/cuda_profile.py MODEL [--prompt 512] [--gen 32]

Runs a prompt and greedy decode twice. First as the backend runs them (decode steps replayed as
CUDA graphs): device time and host wall time per decode step. Then with every launch eager and
bracketed by CUDA events: each kernel's device time per pass, for decode and for prefill. The gap
between a replayed step and the sum of its kernels is what launching and waiting cost.
"""
from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import numpy as np

import llamay
from llamay_backends.cuda import executor as E


class Recorder:
    """Wraps CudaExecutable.__call__: per pass (tokens, device kernel seconds, host seconds); in
    profile mode every launch is eager and timed by its own pair of events."""

    def __init__(self) -> None:
        self.passes: list[tuple[int, float, float]] = []
        self.profile = False
        self.kernel_time: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.kernel_count: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.profiled_passes: collections.Counter = collections.Counter()
        original = E.CudaExecutable.__call__
        recorder = self

        def call(exe: E.CudaExecutable, batch: Any) -> np.ndarray:
            before, t0 = exe.times.kernels, time.perf_counter()
            if recorder.profile:
                return recorder._profiled(exe, batch, original)
            out = original(exe, batch)
            recorder.passes.append((batch.n_tokens, exe.times.kernels - before, time.perf_counter() - t0))
            return out

        E.CudaExecutable.__call__ = call

    def _profiled(self, exe: E.CudaExecutable, batch: Any, original: Any) -> np.ndarray:
        rt = exe.rt
        names = [launch.kernel for launch in exe.launch_list(batch.n_tokens, len(batch.logit_rows))]
        pairs: list[tuple[str, Any, Any]] = []

        def timed(bound: list) -> None:
            for (fn, grid, block, args), name in zip(bound, names):
                start, end = rt.event(), rt.event()
                rt.record(start)
                rt.launch(fn, grid, block, args)
                rt.record(end)
                pairs.append((name, start, end))

        replay, exe.replay = exe.replay, None
        exe._launch_all = timed
        try:
            out = original(exe, batch)
        finally:
            exe.replay = replay
            del exe._launch_all
        phase = phase_of(batch.n_tokens)
        self.profiled_passes[phase] += 1
        for name, start, end in pairs:
            self.kernel_time[phase][name] += rt.elapsed(start, end)
            self.kernel_count[phase][name] += 1
        return out


def phase_of(n_tokens: int) -> str:
    return "decode" if n_tokens == 1 else ("prefill" if n_tokens > E.GRAPH_MAX_TOKENS else f"{n_tokens} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--gen", type=int, default=32)
    args = parser.parse_args()
    recorder = Recorder()
    model = llamay.load(args.model, backend="cuda")
    ids = np.random.default_rng(0).integers(100, 1000, args.prompt).tolist()
    model.generate(ids, max_tokens=args.gen, ignore_eos=True)  # warm: compile, capture
    recorder.passes.clear()
    model.generate(ids, max_tokens=args.gen, ignore_eos=True)
    decode = [(dev, host) for n, dev, host in recorder.passes if n == 1]
    prefill = [(dev, host) for n, dev, host in recorder.passes if n > E.GRAPH_MAX_TOKENS]
    print(f"model {args.model} · prompt {args.prompt} · gen {args.gen}")
    if decode:
        dev, host = np.median([d for d, _ in decode]), np.median([h for _, h in decode])
        print(f"decode step as run (graph replay): device {dev * 1e6:.0f} us, host wall {host * 1e6:.0f} us "
              f"-> {1 / host:.0f} tok/s")
    if prefill:
        dev, host = np.median([d for d, _ in prefill]), np.median([h for _, h in prefill])
        print(f"prefill pass as run: device {dev * 1e3:.2f} ms, host wall {host * 1e3:.2f} ms")
    recorder.profile = True
    model.generate(ids, max_tokens=args.gen, ignore_eos=True)
    for phase, times in recorder.kernel_time.items():
        n = recorder.profiled_passes[phase]
        total = sum(times.values()) / n
        print(f"\n{phase}: {n} passes, kernels sum to {total * 1e6:.0f} us per pass (eager, one event pair each)")
        print(f"{'kernel':28s} {'launches':>8s} {'us/pass':>9s} {'share':>6s}")
        for name, t in times.most_common():
            print(f"{name:28s} {recorder.kernel_count[phase][name] / n:8.0f} {t / n * 1e6:9.1f} {t / n / total:6.1%}")


if __name__ == "__main__":
    main()
