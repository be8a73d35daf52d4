"""The two floors of this machine: memory bandwidth (decode) and f32 matmul rate (prefill).

Usage: python benchmarks/floors.py [-m MODEL ...]
Prints measured bandwidth (one thread, and every core) and GFLOP/s, then for each model the
decode floor (weight bytes per token / the higher bandwidth) and prefill floor (2 x parameters
flops per token / matmul rate).
"""
from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def best_of(fn, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bandwidth_gbs(n_bytes: int = 1 << 30, threads: int = 1) -> float:
    """GB/s summing 1 GiB of float32, split over `threads` (NumPy releases the GIL in the sum)."""
    a = np.ones(n_bytes // 4, np.float32)
    if threads == 1:
        return n_bytes / best_of(lambda: a.sum(dtype=np.float32)) / 1e9
    parts = np.array_split(a, threads)
    with ThreadPoolExecutor(threads) as pool:
        return n_bytes / best_of(lambda: list(pool.map(lambda p: p.sum(dtype=np.float32), parts))) / 1e9


def matmul_gflops(n: int = 2048) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    return 2 * n ** 3 / best_of(lambda: a @ b) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", action="append", default=[], help="model name or path (repeatable)")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    one, every = bandwidth_gbs(), bandwidth_gbs(threads=cores)
    bw, gf = max(one, every), matmul_gflops()
    # decode runs on every core, and two cores of these VMs draw ~1.35x what one does: the floor
    # is the larger figure (the one-thread figure alone was exceeded by qwen's decode)
    print(f"memory bandwidth (numpy sum over 1 GiB): {one:.1f} GB/s on one thread, {every:.1f} GB/s on {cores}; "
          f"floors use {bw:.1f}")
    print(f"f32 matmul (numpy, 2048^3): {gf:.1f} GFLOP/s")
    from llamay_core.files.gguf_file import open_gguf
    from llamay_core.files.model_names import resolve_model

    for spec in args.m:
        g = open_gguf(resolve_model(spec))
        weights = sum(t.n_bytes for t in g.tensors.values())
        # the tied/untied output matrix is read once per token like every other matrix
        params = sum(t.n_elements for t in g.tensors.values() if len(t.shape) == 2)
        print(f"{spec}: {weights / 2**20:.1f} MiB of weights, {params / 1e6:.1f} M matrix parameters; "
              f"decode floor {bw * 1e9 / weights:.0f} tok/s, prefill floor {gf * 1e9 / (2 * params):.0f} tok/s")


if __name__ == "__main__":
    main()
