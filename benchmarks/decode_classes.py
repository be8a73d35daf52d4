"""Where a decode token's matmul time goes, by weight format: each class replayed alone, cold.

Usage: python benchmarks/decode_classes.py -m MODEL [-rounds 3] [-reps 5] [-flush-mib 96]

The matmul instructions of one cpu decode token (its compiled calls, as `decode_ceiling.py`
records them) are grouped by the format of their weights, the token's last matmul (the output
matrix) apart from the layers'. Each round prints the 1 GiB read of `floors.py`, then for each
class, in GB/s of the class's own bytes:
- read: those arrays read by the team's threads, meeting after each matmul as a token does
  (`decode_ceiling.py`'s "per call" read);
- matmul: the class's matmuls alone, its instructions of each recorded call replayed;
each timing after a read of `-flush-mib` MiB that pushes the token's bytes out of the caches, as
the rest of a token does. Best of `-reps`.

Why: a token's matmuls as a whole fall short of the read of their bytes, and by how much differs
by format (the twenty-eighth and twenty-ninth sessions, docs/performance.md: the K-quants most).
Caveat: the first call after a flush also wakes the team's threads (50-80 us cold), which weighs
on the smaller classes; compare a class with itself across builds, alternated in the same minutes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_ceiling  # noqa: E402  (benchmarks/ is not a package)
import floors  # noqa: E402


def format_name(code: int) -> str:
    """A GGML type id as its name (Q8_0, Q6_K, ...)."""
    import gguf

    try:
        return gguf.GGMLQuantizationType(int(code)).name
    except ValueError:
        return str(int(code))


def matmul_classes(calls) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(format, "output" or "layers") -> the (call, row) of each matmul instruction of the token's
    recorded calls (`decode_ceiling.TokenCalls`); the token's last matmul is its "output"."""
    from llamay_backends.cpu import program as P

    found = [(c, i, int(ints[i, P.P1])) for c, (_, (_, ints, *_)) in enumerate(calls.calls)
             for i in range(ints.shape[0]) if ints[i, P.OP] == P.MATMUL]
    classes: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for k, (c, i, code) in enumerate(found):
        key = (format_name(code), "output" if k == len(found) - 1 else "layers")
        classes.setdefault(key, []).append((c, i))
    return classes


def class_replay(calls, members: list[tuple[int, int]]):
    """A function that runs the recorded calls with only the matmul rows `members` (call, row)."""
    chosen = set(members)
    return calls.replay(lambda c, ints: np.array([(c, i) in chosen for i in range(ints.shape[0])], bool))


def class_arrays(calls, program, members: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(table, groups) as `decode_ceiling.decode_arrays` gives them, for the matmuls `members`."""
    rows, groups = [], [0]
    for c, i in members:
        rows += [(a.ctypes.data, a.nbytes) for _, a in decode_ceiling.matmul_arrays(program, calls.calls[c][1][1][i])]
        groups.append(len(rows))
    return np.array(rows, np.int64).reshape(-1, 2), np.array(groups, np.int64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", required=True, help="model name or path")
    ap.add_argument("-rounds", type=int, default=3)
    ap.add_argument("-reps", type=int, default=5)
    ap.add_argument("-flush-mib", type=int, default=96, help="MiB read before each timing (> the last-level cache)")
    args = ap.parse_args(argv)

    import llamay
    from llamay_backends.cpu import kernels, sync, team  # noqa: F401  (kernels first: sync imports them)

    model = llamay.load(args.m, backend="cpu")
    calls = decode_ceiling.TokenCalls(model)
    program = model.executable.program
    read, state, threads = decode_ceiling._reader(), sync.new_state(), max(team.team_threads(), 1)
    flush = np.ones(args.flush_mib << 20, np.uint8)

    def cold(fn) -> float:
        best = float("inf")
        for _ in range(args.reps):
            flush.sum(dtype=np.uint64)
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    measured = []
    for key, members in sorted(matmul_classes(calls).items()):
        table, groups = class_arrays(calls, program, members)
        run = class_replay(calls, members)
        read_class = (lambda t=table, g=groups: read(t, g, True, state, threads))
        run()
        read_class()  # compiled and warm before any timing
        nbytes = int(table[:, 1].sum())
        measured.append((key, run, read_class, nbytes))
        print(f"{key[0]} {key[1]}: {len(members)} matmuls, {nbytes / 2**20:.1f} MiB", flush=True)
    for r in range(args.rounds):
        cols = [f"read 1 GiB {floors.highest_bandwidth()[0]:.1f} GB/s"]
        for (fmt, where), run, read_class, nbytes in measured:
            cols.append(f"{fmt} {where} read {nbytes / cold(read_class) / 1e9:.1f} matmul {nbytes / cold(run) / 1e9:.1f}")
        print(f"round {r + 1} ({time.strftime('%H:%M:%S')}): " + " | ".join(cols), flush=True)
    calls.context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
