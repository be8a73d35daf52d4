"""The measurements behind `llamay bench`. Every figure is timed here, best of N repetitions."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable

import attrs
import numpy as np


@attrs.define
class Sample:
    """One timed test: `tokens` processed in each of `seconds` (one entry per repetition)."""

    test: str  # "pp512", "tg128", "pg512,128", "ttft", "fork", "snapshot", "restore", "sweep256"
    phase: str
    tokens: int
    seconds: list[float] = attrs.Factory(list)
    note: str = ""
    extra: dict[str, Any] = attrs.Factory(dict)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def rate(self) -> float:
        return self.tokens / self.best if self.best > 0 else float("inf")

    @property
    def mean_rate(self) -> float:
        return float(np.mean([self.tokens / s for s in self.seconds]))


def bench_tokens(model: Any, n: int, seed: int = 1234) -> list[int]:
    """Deterministic pseudo-random ordinary tokens (as llama-bench uses random tokens)."""
    rng = np.random.default_rng(seed)
    tok = model.tokenizer
    ids: list[int] = []
    while len(ids) < n:
        for t in rng.integers(0, model.hparams.n_vocab, size=2 * n):
            t = int(t)
            if not tok.is_control(t) and t not in tok.eog_ids:
                ids.append(t)
                if len(ids) == n:
                    break
    return ids


class Bench:
    """Runs tests on one loaded model; `progress` gets one line per finished repetition."""

    def __init__(self, model: Any, reps: int = 3, progress: Callable[[str], None] | None = None) -> None:
        self.model = model
        self.reps = max(1, reps)
        self.progress = progress or (lambda line: None)

    def _time(self, fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def prefill(self, n_prompt: int, depth: int = 0) -> Sample:
        m = self.model
        ub = m.forward.ubatch
        sample = Sample(f"pp{n_prompt}" + (f"@d{depth}" if depth else ""), "prefill", n_prompt,
                        note=f"batched, {min(ub, n_prompt)} at a time")
        base = self._depth_context(depth)
        prompt = bench_tokens(m, n_prompt, seed=99)
        for r in range(self.reps):
            ctx = base.fork()
            sample.seconds.append(self._time(lambda: ctx.extend(prompt)))
            ctx.close()
            self.progress(f"prefill {r + 1}/{self.reps}: {n_prompt / sample.seconds[-1]:.1f} tok/s")
        base.close()
        return sample

    def decode(self, n_gen: int, depth: int = 0) -> Sample:
        sample = Sample(f"tg{n_gen}" + (f"@d{depth}" if depth else ""), "decode", n_gen,
                        note="one token per pass")
        base = self._depth_context(max(depth, 1))
        for r in range(self.reps):
            ctx = base.fork()
            logits = ctx.last_logits()

            def run() -> None:
                nonlocal logits
                for _ in range(n_gen):
                    logits = ctx.extend([int(np.argmax(logits))])

            sample.seconds.append(self._time(run))
            ctx.close()
            self.progress(f"decode {r + 1}/{self.reps}: {n_gen / sample.seconds[-1]:.1f} tok/s")
        base.close()
        return sample

    def prompt_then_generate(self, n_prompt: int, n_gen: int) -> Sample:
        sample = Sample(f"pg{n_prompt},{n_gen}", "pg", n_prompt + n_gen, note="prompt then generation, one run")
        prompt = bench_tokens(self.model, n_prompt, seed=7)
        for r in range(self.reps):
            ctx = self.model.context()

            def run() -> None:
                logits = ctx.extend(prompt)
                for _ in range(n_gen):
                    logits = ctx.extend([int(np.argmax(logits))])

            sample.seconds.append(self._time(run))
            ctx.close()
            self.progress(f"pg {r + 1}/{self.reps}")
        return sample

    def sweep(self, n_prompt: int, widths: list[int]) -> list[Sample]:
        """Prefill of `n_prompt` tokens at each tile width (tokens per pass)."""
        out = []
        original = self.model.forward.ubatch
        try:
            for w in widths:
                self.model.forward.ubatch = w
                s = self.prefill(n_prompt)
                s.test, s.phase, s.note = f"pp{n_prompt}/ub{w}", "sweep", f"tile of {w} tokens"
                s.extra["ubatch"] = w
                out.append(s)
        finally:
            self.model.forward.ubatch = original
        return out

    def sweep_prompt(self, lengths: list[int]) -> list[Sample]:
        """Prefill at each prompt length."""
        out = []
        for n in lengths:
            s = self.prefill(n)
            s.test, s.phase = f"pp{n}", "sweep"
            s.extra["prompt"] = n
            out.append(s)
        return out

    def _depth_context(self, depth: int) -> Any:
        ctx = self.model.context()
        if depth:
            ctx.extend(bench_tokens(self.model, depth, seed=5))
        return ctx

    def state_engine(self, n_prompt: int, forks: int, prefill_seconds: float) -> list[Sample]:
        """fork xN, snapshot and restore of a prefilled context, against re-prefilling it."""
        m = self.model
        ctx = m.context()
        ctx.extend(bench_tokens(m, n_prompt, seed=99))
        pages = len(ctx.seq.pages)
        fork_s = Sample(f"fork x{forks}", "fork", forks)
        snap_s = Sample("snapshot", "snapshot", n_prompt)
        rest_s = Sample("restore", "restore", n_prompt)
        with tempfile.TemporaryDirectory(prefix="llamay-bench-") as tmp:
            path = os.path.join(tmp, "ctx.llamaykv")
            for _ in range(self.reps):
                before = m.pool.pages_allocated_total
                t0 = time.perf_counter()
                children = [ctx.fork() for _ in range(forks)]
                fork_s.seconds.append(time.perf_counter() - t0)
                fork_s.extra["pages_allocated"] = m.pool.pages_allocated_total - before
                for c in children:
                    c.close()
                t0 = time.perf_counter()
                size = ctx.snapshot(path)
                snap_s.seconds.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                restored = m.restore(path)
                rest_s.seconds.append(time.perf_counter() - t0)
                restored.close()
        ctx.close()
        fork_s.note = (f"{fork_s.extra['pages_allocated']} pages allocated "
                       f"(a copy would be {pages * forks})")
        fork_s.extra["copy_pages"] = pages * forks
        snap_s.note = f"{size / 2**20:.2f} MiB for {n_prompt} tokens, at {m.kv_spec.dtype}"
        snap_s.extra["bytes"] = size
        rest_s.note = f"vs {_fmt_seconds(prefill_seconds)} to re-prefill"
        rest_s.extra["speedup"] = prefill_seconds / rest_s.best if rest_s.best else float("inf")
        return [fork_s, snap_s, rest_s]


def _fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f}µs"
    if s < 1.0:
        return f"{s * 1e3:.0f}ms"
    return f"{s:.3f}s"


fmt_seconds = _fmt_seconds
