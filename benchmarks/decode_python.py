"""The Python around a decode token: a token's time less its compiled team call.

Usage: python benchmarks/decode_python.py [-m MODEL] [-tokens 150] [-rounds 5]

Decodes greedily as `llamay bench` does (`Context.extend` of the last token's argmax) and times
each round's tokens whole and the program's team call inside them; prints, per round, the
microseconds a token spends outside that call (the engine's and the backend's Python, the argmax)
and their median. The cpu backend's program with a team only (`backends/cpu/program.py`). Why
apart from `decode_ceiling.py`: this cost does not depend on the host's memory speed the way a
token does, so two commits can be compared by it minute for minute.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", default="smollm2:135m", help="model name or path")
    ap.add_argument("-tokens", type=int, default=150, help="tokens per round")
    ap.add_argument("-rounds", type=int, default=5)
    args = ap.parse_args(argv)

    import llamay

    model = llamay.load(args.m, backend="cpu")
    program = model.executable.program
    if program is None or program._team_entry is None:
        raise SystemExit("the cpu backend runs this model without a team: nothing to time")
    inside = [0]
    entry = program._team_entry

    def timed(*a):
        t0 = time.perf_counter_ns()
        result = entry(*a)
        inside[0] += time.perf_counter_ns() - t0
        return result

    program._team_entry = timed
    ctx = model.context()
    logits = ctx.extend([1, 2, 3, 4])
    for _ in range(16):
        logits = ctx.extend([int(np.argmax(logits))])
    outside = []
    for _ in range(args.rounds):
        inside[0] = 0
        t0 = time.perf_counter_ns()
        for _ in range(args.tokens):
            logits = ctx.extend([int(np.argmax(logits))])
        outside.append((time.perf_counter_ns() - t0 - inside[0]) / args.tokens / 1e3)
    print(f"{args.m}: Python a token " + " ".join(f"{v:.1f}" for v in outside)
          + f" us, median {np.median(outside):.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
