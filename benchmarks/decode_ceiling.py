"""How close this host lets a cpu decode token come to its bandwidth floor.

Usage: python benchmarks/decode_ceiling.py -m MODEL [-m MODEL ...] [-reps 5] [-gen 32] [-rounds 2]

For each model, in one process and alternated `-rounds` times, in tok/s:
- floor: the weight bytes a token reads / the highest 1 GiB read of this round, as `floors.py`
- one pass: the very arrays a cpu decode token streams (the interleaved copies in the model's
  weight arena, and the logits matrix), read by the team's threads, each its half of each array,
  with no arithmetic and no meeting in between: what memory gives these bytes where they sit
- per call: the same reads, the threads meeting at the team's barrier after each matmul
  instruction, as a decode token's threads do (`backends/cpu/team.py`)
- matmuls: a token's compiled calls replayed with their matmul instructions only: the kernels,
  their tasks and barriers, on the bytes above
- compiled: the token's compiled calls replayed whole (attention and the row-local ops too):
  a token without its Python steps and the engine's per-pass Python
- decode: `Bench.decode(gen)`, the real token, best of `reps`

Each is also given as a share of the floor. Why: the goal "decode at 90% of the floor" compares a
token with the best read of a 1 GiB buffer, and whether that is reachable depends on how fast
this host reads the token's own bytes at all. A figure under 90% in the "one pass" column says
no kernel can reach the goal on this host. From "per call" to "matmuls" is what the dots cost over
reading the bytes, to "compiled" what attention and the row-local ops add, and to "decode" the
Python around a pass.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floors  # noqa: E402  (benchmarks/ is not a package)


def _sum_blocks():
    """An intrinsic sum_blocks(address, count): the 64-bit integer sum of `count` blocks of 256
    bytes from `address`, four 64-byte loads a block into four sums. Integers, because a weight's
    bytes read as floats can be subnormals, whose adds run in microcode; written as IR, because
    Numba's own loop over an array compiles to one 8-byte load at a time here (reads from L3 at
    half the speed of this one)."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    i64 = ir.IntType(64)
    vec = ir.VectorType(i64, 8)

    @intrinsic
    def sum_blocks(typingctx, address, count):
        def codegen(context, builder, sig, args):
            base, n = args
            start = builder.block
            loop = builder.append_basic_block("blocks")
            done = builder.append_basic_block("summed")
            builder.cbranch(builder.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
            builder.position_at_end(loop)
            j = builder.phi(i64)
            j.add_incoming(ir.Constant(i64, 0), start)
            sums = [builder.phi(vec) for _ in range(4)]
            new = []
            for k, acc in enumerate(sums):
                acc.add_incoming(ir.Constant(vec, None), start)
                at = builder.add(base, builder.add(builder.mul(j, ir.Constant(i64, 256)), ir.Constant(i64, 64 * k)))
                line = builder.load(builder.inttoptr(at, vec.as_pointer()), align=8)
                new.append(builder.add(acc, line))
            j_next = builder.add(j, ir.Constant(i64, 1))
            for acc, value in zip(sums, new):
                acc.add_incoming(value, loop)
            j.add_incoming(j_next, loop)
            combined = builder.add(builder.add(new[0], new[1]), builder.add(new[2], new[3]))
            builder.cbranch(builder.icmp_signed("<", j_next, n), loop, done)
            builder.position_at_end(done)
            total = builder.phi(vec)
            total.add_incoming(ir.Constant(vec, None), start)
            total.add_incoming(combined, loop)
            lanes = [builder.extract_element(total, ir.Constant(ir.IntType(32), k)) for k in range(8)]
            out = lanes[0]
            for lane in lanes[1:]:
                out = builder.add(out, lane)
            return out
        return types.int64(types.int64, types.int64), codegen

    return sum_blocks


def _reader():
    import numba
    from llamay_backends.cpu import sync
    from numba import prange

    sum_blocks = _sum_blocks()

    @numba.njit(parallel=True)
    def read(table, groups, meet, state, n_threads):
        """Each thread its share of each array of each group (whole 256-byte blocks: the tail of
        an array, under 256 bytes, is left unread), meeting after each group where `meet`."""
        sums = np.zeros(n_threads, np.int64)
        for tid in prange(n_threads):
            s = 0
            for g in range(groups.shape[0] - 1):
                for k in range(groups[g], groups[g + 1]):
                    blocks = table[k, 1] // 256
                    lo = tid * blocks // n_threads
                    hi = (tid + 1) * blocks // n_threads
                    s += sum_blocks(table[k, 0] + 256 * lo, hi - lo)
                if meet:
                    sync.barrier(state, n_threads, np.empty(0, np.uint8), 0, 0)
            sums[tid] = s
        return sums.sum()

    return read


def decode_arrays(model) -> tuple[np.ndarray, np.ndarray]:
    """(table, groups) of the arrays one decode token streams, in the order it reads them: table
    rows (address, bytes), groups[g]..groups[g+1]-1 the rows one matmul instruction reads."""
    from llamay_backends.cpu import program as P

    prog = getattr(model.executable, "program", None)
    if prog is None:
        raise SystemExit("decode_ceiling: this model's decode is not a compiled cpu program (backend cpu only)")
    rows, groups, seen = [], [0], set()
    for segment in prog.segments:
        if isinstance(segment, int):
            continue
        for ins in segment[0]:
            if ins[P.OP] != P.MATMUL:
                continue
            for k, a in matmul_arrays(prog, ins):
                if k not in seen:
                    seen.add(k)
                    rows.append((a.ctypes.data, a.nbytes))
            if len(rows) > groups[-1]:
                groups.append(len(rows))
    return np.array(rows, np.int64).reshape(-1, 2), np.array(groups, np.int64)


def matmul_arrays(prog, ins) -> list[tuple[int, np.ndarray]]:
    """(id, array) of each weight matmul instruction `ins` of program `prog` reads: one to three,
    absent and empty ones left out."""
    from llamay_backends.cpu import program as P

    found = []
    for col in (P.W, P.W2, P.W3):
        k = int(ins[col])
        a = prog.weights.arrays[k] if k >= 0 else None
        if a is not None and a.size:
            found.append((k, a))
    return found


class TokenCalls:
    """One decode token's compiled calls (the team's, or `_run`'s where no team runs), recorded
    as the model made them and replayed as they are or with only some instructions: the token
    without its Python, and its matmuls alone (the same kernels, tasks and barriers)."""

    def __init__(self, model) -> None:
        self.program = model.executable.program
        self.calls: list[tuple] = []
        self._matmuls = None  # run(matmuls_only=True)'s replay, made on its first use
        entries = self.program._team_entry, self.program._entry
        self.program._team_entry, self.program._entry = (None if e is None else self._recorder(e) for e in entries)
        try:
            self.context = model.context()  # kept open: the calls name its pages
            logits = self.context.extend([1, 2])
            self.calls.clear()
            self.context.extend([int(np.argmax(logits))])
        finally:
            self.program._team_entry, self.program._entry = entries

    def _recorder(self, entry):
        def call(*args):
            self.calls.append((entry, args))
            return entry(*args)
        return call

    def replay(self, keep):
        """A function that runs the recorded calls with only the instructions `keep(c, ints)` marks
        (a boolean a row of call c's instructions); the kept rows are copied here, once, not on
        every run that is timed."""
        plan = []
        for c, (entry, (formats, ints, floats, *rest)) in enumerate(self.calls):
            mask = keep(c, ints)
            if mask.any():
                plan.append((entry, formats, np.ascontiguousarray(ints[mask]), np.ascontiguousarray(floats[mask]),
                             rest))

        def run() -> None:
            for entry, formats, ints, floats, rest in plan:
                entry(formats, ints, floats, *rest)

        return run

    def run(self, matmuls_only: bool = False) -> None:
        from llamay_backends.cpu import program as P

        if not matmuls_only:
            for entry, args in self.calls:
                entry(*args)
            return
        if self._matmuls is None:
            self._matmuls = self.replay(lambda c, ints: ints[:, P.OP] == P.MATMUL)
        self._matmuls()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", action="append", required=True, help="model name or path (repeatable)")
    parser.add_argument("-reps", type=int, default=5)
    parser.add_argument("-gen", type=int, default=32)
    parser.add_argument("-rounds", type=int, default=2)
    args = parser.parse_args()

    import llamay
    from llama_cpp_side_by_side import machine
    from llamay_backends.cpu import kernels, sync, team  # noqa: F401  (kernels first: sync imports them)

    from llamay_core.bench.measure import Bench
    from llamay_core.files.gguf_file import open_gguf
    from llamay_core.files.model_names import resolve_model

    host = machine()
    print(f"# {host['cpu']}, {os.cpu_count()} cpus, {' '.join(host['flags'])}")
    read = _reader()
    threads = max(team.team_threads(), 1)
    state = sync.new_state()
    for spec in args.m:
        model = llamay.load(spec, backend="cpu")
        table, groups = decode_arrays(model)
        streamed = int(table[:, 1].sum())
        token = floors.token_bytes(open_gguf(resolve_model(spec)).tensors)
        print(f"{spec}: {len(groups) - 1} matmul instructions a token read {streamed / 2**20:.1f} MiB "
              f"(the file's token bytes: {token / 2**20:.1f} MiB), {threads} threads, "
              f"kernels {model.backend.describe()['kernels']}")
        bench, calls = Bench(model, reps=args.reps), TokenCalls(model)
        for r in range(args.rounds):
            best = floors.highest_bandwidth()[0]
            floor = best * 1e9 / token
            times = {"one pass": floors.best_of(lambda: read(table, groups, False, state, threads), args.reps),
                     "per call": floors.best_of(lambda: read(table, groups, True, state, threads), args.reps),
                     "matmuls": floors.best_of(lambda: calls.run(matmuls_only=True), args.reps),
                     "compiled": floors.best_of(calls.run, args.reps)}
            rate = bench.decode(args.gen).rate
            cols = [f"floor {floor:.1f} tok/s ({best:.1f} GB/s)"]
            cols += [f"{name} {streamed / t / 1e9:.1f} GB/s = {1 / t:.1f} tok/s, {100 / t / floor:.0f}%"
                     for name, t in times.items()]
            cols.append(f"decode {rate:.1f} tok/s, {100 * rate / floor:.0f}%")
            print(f"  round {r + 1}: " + " | ".join(cols), flush=True)
        calls.context.close()


if __name__ == "__main__":
    main()
