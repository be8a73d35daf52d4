"""Many questions asked of one shared prefix: forked from a warm context vs prefilled from scratch."""
from __future__ import annotations

import time
from typing import Any, Callable

import attrs

from llamay_core.bench.measure import bench_tokens
from llamay_core.engine.quick_check import greedy_continue


@attrs.frozen
class BenchforkResult:
    prefix_tokens: int
    questions: int
    gen: int
    warm_prefill_s: float
    forked_s: float
    scratch_s: float
    forked_tokens: list[list[int]]
    scratch_tokens: list[list[int]]
    pages_allocated_by_forks: int

    @property
    def ratio(self) -> float:
        return self.scratch_s / self.forked_s if self.forked_s else float("inf")


def benchfork(model: Any, prefix: int, questions: int, gen: int, question_len: int = 12,
              progress: Callable[[str], None] | None = None) -> BenchforkResult:
    say = progress or (lambda line: None)
    shared = bench_tokens(model, prefix, seed=11)
    qs = [bench_tokens(model, question_len, seed=100 + i) for i in range(questions)]
    warm = model.context()
    t0 = time.perf_counter()
    warm.extend(shared)
    warm_s = time.perf_counter() - t0
    forked, scratch = [], []
    before = model.pool.pages_allocated_total
    t0 = time.perf_counter()
    for i, q in enumerate(qs):
        child = warm.fork()
        forked.append(greedy_continue(child, q, gen))
        child.close()
        say(f"forked question {i + 1}/{questions}")
    forked_s = time.perf_counter() - t0
    allocated = model.pool.pages_allocated_total - before
    warm.close()
    t0 = time.perf_counter()
    for i, q in enumerate(qs):
        ctx = model.context()
        scratch.append(greedy_continue(ctx, shared + q, gen))
        ctx.close()
        say(f"scratch question {i + 1}/{questions}")
    scratch_s = time.perf_counter() - t0
    return BenchforkResult(prefix, questions, gen, warm_s, forked_s, scratch_s, forked, scratch, allocated)
