"""One decode row's attention on the cpu backend, one thread: microseconds per row at each depth.

    python benchmarks/cpu_decode_attention.py                      # qwen2.5's shape: 14 heads, 2 KV, 64
    python benchmarks/cpu_decode_attention.py --heads 4 --kv-heads 1 --dim 256   # gemma3:270m's

A row's keys are cut into pieces (`ops.attention_plan`); each piece is one task
(`ops.attention_task`), and the pieces merge in order (`ops.attention_merge`). This times all of
it on one thread over f32 pages of 16 keys in shuffled order, best of several runs, a row per
layer over `--layers` layers' own pages (24, as qwen2.5-coder:0.5b: at depth they come from
memory, as in a decode; `--layers 1` keeps them in cache). In a decode the team shares the pieces
between its threads.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from llamay_backends.cpu import ops

PAGE = 16


@njit(cache=True)
def _rows(reps, position, q, k_layers, v_layers, tables, n_heads, n_kv_heads, dim, out):
    positions = np.full(1, position, np.int64)
    rows = np.zeros(1, np.int64)
    seq = np.zeros(1, np.int64)
    tasks = 0
    for _ in range(reps):
        firsts, sizes, task_start = ops.attention_plan(positions, rows, 0)
        tasks = task_start[1]
        part_m = np.empty((tasks, n_heads), np.float32)
        part_l = np.empty((tasks, n_heads), np.float32)
        part_o = np.empty((tasks, n_heads * dim), np.float32)
        for layer in range(k_layers.shape[0]):
            for t in range(tasks):
                ops.attention_task(t, q, positions, seq, tables, k_layers[layer], v_layers[layer], n_heads,
                                   n_kv_heads, dim, dim, dim ** -0.5, 0.0, rows, firsts, sizes, task_start, part_m,
                                   part_l, part_o, out)
            ops.attention_merge(rows, task_start, part_m, part_l, part_o, out, 0, 1)
    return tasks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=14)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64, help="key and value width of a head (a multiple of 64)")
    ap.add_argument("--depths", default="127,511,2047,4095", help="comma-separated row positions")
    ap.add_argument("--layers", type=int, default=24, help="layers, each with its own pages (default 24)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per depth; the best is printed")
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    rng = np.random.default_rng(0)
    n_pages = max(depths) // PAGE + 1
    width = args.kv_heads * args.dim
    k_layers = rng.standard_normal((args.layers, n_pages, PAGE, width), np.float32)
    v_layers = rng.standard_normal((args.layers, n_pages, PAGE, width), np.float32)
    tables = rng.permutation(n_pages).astype(np.int64).reshape(1, n_pages)
    q = rng.standard_normal((1, args.heads * args.dim)).astype(np.float32)
    out = np.zeros_like(q)
    shape = (q, k_layers, v_layers, tables, args.heads, args.kv_heads, args.dim, out)
    print(f"{args.heads} heads, {args.kv_heads} KV heads, {args.dim} wide, f32 pages of {PAGE}, {args.layers} layers,"
          " one thread")
    for depth in depths:
        reps = max(3, 200_000 // (depth + 1) // args.layers)
        _rows(2, depth, *shape)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tasks = _rows(reps, depth, *shape)
            best = min(best, (time.perf_counter() - t0) / reps / args.layers)
        print(f"position {depth:6d}: {tasks:3d} pieces, {best * 1e6:8.2f} us a row")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
