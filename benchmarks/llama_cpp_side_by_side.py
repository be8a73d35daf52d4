"""llamay's cpu backend and llama.cpp (through llama-cpp-python) measured in one run.

A local tool, never a dependency or a CI step: llama-cpp-python builds llama.cpp from source
(about 15 minutes on 2 cores), e.g. `CMAKE_ARGS=-DGGML_NATIVE=ON pip install llama-cpp-python`
into a separate venv, then run this script with that venv's python after `pip install -e .`.

Usage: python benchmarks/llama_cpp_side_by_side.py -m smollm2:135m [-prompt 512] [-gen 128] [-reps 3]
Prints prefill (pp) and decode (tg) tok/s for both, alternating runs so load hits both alike.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def llamay_rates(model: str, n_prompt: int, n_gen: int) -> tuple[float, float]:
    import llamay
    from llamay_core.bench.measure import Bench

    m = llamay.load(model, backend="cpu", n_ctx=n_prompt + n_gen + 32, n_seq=2)
    bench = Bench(m, reps=1)
    return bench.prefill(n_prompt).rate, bench.decode(n_gen).rate


def llama_cpp_rates(path: str, n_prompt: int, n_gen: int, threads: int) -> tuple[float, float]:
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=n_prompt + n_gen + 32, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    rng = np.random.default_rng(99)
    prompt = [int(t) for t in rng.integers(100, llm.n_vocab() - 100, size=n_prompt)]
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    pp = n_prompt / (time.perf_counter() - t0)
    llm.reset()
    llm.eval([prompt[0]])
    t0 = time.perf_counter()
    token = prompt[1]
    for _ in range(n_gen):
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    tg = n_gen / (time.perf_counter() - t0)
    return pp, tg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", default="smollm2:135m")
    parser.add_argument("-prompt", type=int, default=512)
    parser.add_argument("-gen", type=int, default=128)
    parser.add_argument("-reps", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    from llamay_core.files.model_names import resolve_model

    path = str(resolve_model(args.m))
    ours, theirs = [], []
    for _ in range(args.reps):
        ours.append(llamay_rates(args.m, args.prompt, args.gen))
        theirs.append(llama_cpp_rates(path, args.prompt, args.gen, args.t))
    best = lambda rows, i: max(r[i] for r in rows)  # noqa: E731
    print(f"{args.m}: best of {args.reps}, {args.t} threads")
    for i, name in enumerate((f"pp{args.prompt}", f"tg{args.gen}")):
        a, b = best(ours, i), best(theirs, i)
        print(f"{name:>7}  llamay cpu {a:8.1f} tok/s   llama.cpp {b:8.1f} tok/s   ratio {a / b:.2f}x")


if __name__ == "__main__":
    main()
