"""How fast each format's one-token decode kernel streams a weight from memory, next to a plain read.

Usage: python benchmarks/format_stream.py [-rounds 3] [-reps 7] FMT:MIB[:COLS] ...
       e.g. Q8_0:160:640 Q5_0:120 Q4_K:60 Q6_K:60

Each spec is one weight of that format, MIB MiB of random valid blocks (about; whole groups of
64 rows), COLS columns (default 896, 1024 for the K-quants): large enough that it streams from
memory, as a decode token's weights do. Each round prints the 1 GiB read of `floors.py` with the
kernels' threads (NUMBA_NUM_THREADS), then each weight's GB/s through `interleaved_kernel` (the
kernel a decode token runs, with its prefetch hints) and its share of that round's read.

Why: a decode token is its matmuls, and this host's bandwidth moves minute by minute, so a
kernel change (hints, instruction counts) is judged by the share of the read a format gets in
the same minute, alternating builds (`NUMBA_CACHE_DIR` apart, `PYTHONPATH` on a second tree),
not by one tok/s figure (docs/performance.md, twenty-fourth session).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floors  # noqa: E402  (benchmarks/ is not a package)


def parse_spec(spec: str) -> tuple[str, float, int | None]:
    """'Q5_0:120' or 'Q8_0:160:640' -> (format name, MiB, columns or None)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"{spec!r}: expected FMT:MIB or FMT:MIB:COLS")
    return parts[0].upper(), float(parts[1]), int(parts[2]) if len(parts) == 3 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="FMT:MIB[:COLS]")
    parser.add_argument("-rounds", type=int, default=3)
    parser.add_argument("-reps", type=int, default=7)
    args = parser.parse_args(argv)

    import numba

    import llamay_backends.cpu.kernels as K
    from cpu_kernels import random_weights
    from llamay_backends.cpu import isa
    from llamay_backends.cpu.kernels import _simd

    rng = np.random.default_rng(1)
    threads = numba.get_num_threads()
    weights = []
    for spec in args.specs:
        name, mib, cols = parse_spec(spec)
        code = K.type_code(name)
        cols = cols or (1024 if name.endswith("_K") else 896)
        group = random_weights(code, 64, cols, rng)  # repeated: random bytes cost seconds a GiB
        rows = max(1, int(mib * 2**20 / group[0].nbytes) // 64) * 64
        packed = K.interleave(code, np.tile(group, (rows // 64, 1)))
        X = rng.standard_normal((1, cols)).astype(np.float32)
        out = np.zeros((1, rows), np.float32)
        kernel = K.interleaved_kernel(code, packed, cols)
        kernel(X, out)  # compiled before any timing
        weights.append((f"{name} {rows}x{cols}", kernel, X, out, rows * group[0].nbytes))
    print(f"# {threads} threads, kernels {isa.describe(set(_simd.FEATURES))}, zen hints {_simd.HOST_IS_ZEN}")
    for r in range(args.rounds):
        read = floors.simd_read_gbs(1 << 30, threads)
        cols_out = [f"read {read:.1f} GB/s"]
        for label, kernel, X, out, nbytes in weights:
            rate = nbytes / floors.best_of(lambda: kernel(X, out), args.reps) / 1e9
            cols_out.append(f"{label} {rate:.1f} ({100 * rate / read:.0f}%)")
        print(f"round {r + 1}: " + " | ".join(cols_out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
