"""The two floors of this machine: memory bandwidth (decode) and f32 matmul rate (prefill).

Usage: python benchmarks/floors.py [-m MODEL ...]
Prints measured bandwidth (one thread, and every core) and GFLOP/s, then for each model the
decode floor (the weight bytes a token reads / the highest bandwidth) and prefill floor (2 x
parameters flops per token / matmul rate).

Bandwidth is read two ways: NumPy's float32 sum, and a compiled 16-lane read (`simd_read_gbs`).
NumPy's sum is not a pure stream (its pairwise adds cost more than the loads: on one core it
read 25.6-26.2 GB/s where the compiled read got 35.2-36.6, AMD EPYC, 2026-12-05), and the host's
bandwidth swings minutes apart (the compiled read on two cores: 33-61 GB/s that morning), so the
floor takes the highest figure of this run; measure it next to the decode it is compared with.
"""
from __future__ import annotations

import argparse
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from llamay_core.host_info import usable_cores


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


@functools.cache
def _simd_reader():
    # built on first use (floors.py imports without Numba) and once a run: both reads share it
    import numba

    from llamay_backends.cpu.kernels._simd import vadd, vhsum, vld, vzero

    @numba.njit(parallel=True)
    def read(v, parts):
        sums = np.zeros(parts, np.float32)
        for c in numba.prange(parts):
            lo = c * v.size // parts // 64 * 64
            hi = (c + 1) * v.size // parts // 64 * 64
            a0, a1, a2, a3 = vzero(), vzero(), vzero(), vzero()
            for i in range(lo, hi, 64):  # four independent sums: the loads, not the adds, set the pace
                a0 = vadd(a0, vld(v, i))
                a1 = vadd(a1, vld(v, i + 16))
                a2 = vadd(a2, vld(v, i + 32))
                a3 = vadd(a3, vld(v, i + 48))
            sums[c] = vhsum(vadd(vadd(a0, a1), vadd(a2, a3)))
        return sums.sum()

    return read


def simd_read_gbs(n_bytes: int = 1 << 30, threads: int = 1) -> float:
    """GB/s reading n_bytes of float32 with 16-lane loads, in `threads` parts at once."""
    read = _simd_reader()
    a = np.ones(n_bytes // 4, np.float32)
    return n_bytes / best_of(lambda: read(a, threads)) / 1e9


def _lookup_only(tensors: dict) -> Any:
    # an embedding table that is not also the output matrix (an output.weight exists): a token
    # reads one row of it and multiplies nothing by it
    embd = tensors.get("token_embd.weight")
    return embd if embd is not None and "output.weight" in tensors else None


def token_bytes(tensors: dict) -> int:
    """Bytes of weights one decode token reads: every tensor, but only the token's row of an
    embedding table that is not also the output matrix."""
    total = sum(t.n_bytes for t in tensors.values())
    embd = _lookup_only(tensors)
    if embd is not None:
        total -= embd.n_bytes - embd.n_bytes // max(int(embd.shape[0]), 1)  # shape: rows, columns
    return total


def matrix_params(tensors: dict) -> int:
    """Parameters a token multiplies by: every matrix but a lookup-only embedding table."""
    embd = _lookup_only(tensors)
    return sum(t.n_elements for t in tensors.values() if len(t.shape) == 2 and t is not embd)


def highest_bandwidth() -> tuple[float, str]:
    """(GB/s, a line saying how it was read): the highest of the four reads of 1 GiB, NumPy's
    sum and the 16-lane read, each on one thread and on every core. Decode runs on every core:
    the floor is the highest figure any reader reached."""
    cores = usable_cores()
    one, every = bandwidth_gbs(), bandwidth_gbs(threads=cores)
    read_one, read_every = simd_read_gbs(), simd_read_gbs(threads=cores)
    bw = max(one, every, read_one, read_every)
    return bw, (f"memory bandwidth over 1 GiB: numpy sum {one:.1f} GB/s on one thread, {every:.1f} on {cores}; "
                f"16-lane read {read_one:.1f} on one, {read_every:.1f} on {cores}; floors use {bw:.1f}")


def matmul_gflops(n: int = 2048) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    return 2 * n ** 3 / best_of(lambda: a @ b) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", action="append", default=[], help="model name or path (repeatable)")
    args = parser.parse_args()
    bw, line = highest_bandwidth()
    gf = matmul_gflops()
    print(line)
    print(f"f32 matmul (numpy, 2048^3): {gf:.1f} GFLOP/s")
    from llamay_core.files.gguf_file import open_gguf
    from llamay_core.files.model_names import resolve_model

    for spec in args.m:
        g = open_gguf(resolve_model(spec))
        weights, params = token_bytes(g.tensors), matrix_params(g.tensors)
        print(f"{spec}: {weights / 2**20:.1f} MiB of weights a token reads, {params / 1e6:.1f} M matrix parameters; "
              f"decode floor {bw * 1e9 / weights:.0f} tok/s, prefill floor {gf * 1e9 / (2 * params):.0f} tok/s")


if __name__ == "__main__":
    main()
