"""llamay's cpu backend and llama.cpp measured in one run, on one machine, alternately.

A local tool, never a dependency or a CI step. llama.cpp runs two ways, each when available:
its own `llama-bench` binary (`-llama-bench PATH`, repeatable: e.g. a GGML_NATIVE build and
an AVX2-only build of the llama-cpp-python sdist's vendored source, built outside the repo)
and llama-cpp-python (when it is importable in this venv). Every rep runs each engine once,
in turn, so host load hits them alike; the best rep is reported.

The report names the CPU model and its SIMD flags, the kernel level llamay compiled for
(`LLAMAY_CPU_ISA=avx2` forces the AVX2-only build) and its decode activations, the BLAS
kernels of its prompt GEMM, and for each llama-bench binary the CPU it reported and the GGML_*
options of its build. With `LLAMAY_CPU_ISA=avx2` the script also sets `OPENBLAS_CORETYPE=Haswell`
(unless set) before NumPy loads its BLAS, so the forced prefill is AVX2 throughout, as on an
AVX2-only machine.

`-d N` measures both with N tokens already in the context (llama-bench's -d); `-kv f16` gives
llamay llama.cpp's default KV dtype (llamay's default is f32).

Usage: python benchmarks/llama_cpp_side_by_side.py -m smollm2:135m [-prompt 512] [-gen 128]
       [-reps 3] [-t 2] [-d 0] [-kv f32] [-llama-bench PATH ...] [-no-python]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

if os.environ.get("LLAMAY_CPU_ISA", "").strip().lower() == "avx2":  # before NumPy loads OpenBLAS
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

import numpy as np  # noqa: E402

SIMD_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
              "avx512_bf16", "amx_int8")


def machine() -> dict:
    """CPU model and SIMD flags from /proc/cpuinfo."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"cpu": model, "flags": [f for f in SIMD_FLAGS if f in flags]}


def llamay_rates(model: str, n_prompt: int, n_gen: int, depth: int, kv: str) -> tuple[float, float, dict]:
    import llamay
    from llamay_core.bench.measure import Bench

    m = llamay.load(model, backend="cpu", n_ctx=depth + n_prompt + n_gen + 32, n_seq=2, kv_dtype=kv)
    bench = Bench(m, reps=1)
    return bench.prefill(n_prompt, depth=depth).rate, bench.decode(n_gen, depth=depth).rate, m.backend.describe()


def llama_cpp_python_rates(path: str, n_prompt: int, n_gen: int, threads: int, depth: int) -> tuple[float, float]:
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=depth + n_prompt + n_gen + 32, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    rng = np.random.default_rng(99)
    cached = [int(t) for t in rng.integers(100, llm.n_vocab() - 100, size=depth)]
    prompt = [int(t) for t in rng.integers(100, llm.n_vocab() - 100, size=n_prompt)]
    llm.reset()
    if cached:
        llm.eval(cached)
    t0 = time.perf_counter()
    llm.eval(prompt)
    pp = n_prompt / (time.perf_counter() - t0)
    llm.reset()
    llm.eval(cached + [prompt[0]])
    t0 = time.perf_counter()
    token = prompt[1]
    for _ in range(n_gen):
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    tg = n_gen / (time.perf_counter() - t0)
    return pp, tg


def llama_bench_rates(binary: str, path: str, n_prompt: int, n_gen: int, threads: int,
                      depth: int) -> tuple[float, float, dict]:
    """pp and tg tok/s from one `llama-bench -r 1` run, and what it says about itself."""
    cmd = [binary, "-m", path, "-p", str(n_prompt), "-n", str(n_gen), "-t", str(threads), "-r", "1", "-o", "json"]
    if depth:
        cmd += ["-d", str(depth)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{binary} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    rows = json.loads(done.stdout)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == n_prompt and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == n_gen and r["n_prompt"] == 0)
    first = rows[0]
    info = {"cpu_info": first.get("cpu_info"), "build_commit": first.get("build_commit"),
            "backends": first.get("backends"), "build_options": build_options(binary)}
    return pp, tg, info


def build_options(binary: str) -> dict:
    """GGML_* options from the CMakeCache.txt of the build the binary came from, if found."""
    for parent in Path(binary).resolve().parents:
        cache = parent / "CMakeCache.txt"
        if cache.exists():
            opts = {}
            for line in cache.read_text().splitlines():
                if line.startswith(("GGML_NATIVE:", "GGML_AVX", "GGML_FMA:", "GGML_F16C:", "GGML_BMI2:")):
                    key, value = line.split("=", 1)
                    opts[key.split(":")[0]] = value
            return opts
    return {}


def _depth(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a depth of at least 0, got {text}")
    return value


def _positive(text: str) -> int:
    # both tests run (pp and tg): a 0 would leave one without tokens to time
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a count of at least 1, got {text}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", default="smollm2:135m")
    parser.add_argument("-prompt", type=_positive, default=512)
    parser.add_argument("-gen", type=_positive, default=128)
    parser.add_argument("-reps", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("-d", type=_depth, default=0, help="tokens already in the context (llama-bench's -d)")
    parser.add_argument("-kv", choices=["f32", "f16"], default="f32", help="llamay's KV dtype (llama.cpp: f16)")
    parser.add_argument("-llama-bench", dest="llama_bench", action="append", default=[],
                        help="a llama-bench binary to run too (repeatable)")
    parser.add_argument("-no-python", dest="no_python", action="store_true", help="skip llama-cpp-python")
    args = parser.parse_args()
    from llamay_core.files.model_names import resolve_model

    path = str(resolve_model(args.m))
    engines: dict[str, list[tuple[float, float]]] = {"llamay cpu": []}
    notes: dict[str, dict] = {}
    use_python = not args.no_python
    if use_python:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            use_python = False
            print("llama-cpp-python is not installed here: skipped")
    for _ in range(args.reps):
        pp, tg, notes["llamay cpu"] = llamay_rates(args.m, args.prompt, args.gen, args.d, args.kv)
        engines["llamay cpu"].append((pp, tg))
        for binary in args.llama_bench:
            pp, tg, notes[binary] = llama_bench_rates(binary, path, args.prompt, args.gen, args.t, args.d)
            engines.setdefault(binary, []).append((pp, tg))
        if use_python:
            engines.setdefault("llama-cpp-python", []).append(
                llama_cpp_python_rates(path, args.prompt, args.gen, args.t, args.d))
    host = machine()
    print(f"{args.m}: best of {args.reps}, {args.t} threads, llamay KV {args.kv}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {host['cpu']}; flags: {' '.join(host['flags'])}")
    for name, note in notes.items():
        print(f"{name}: {json.dumps(note)}")
    ours = engines["llamay cpu"]
    at = f"@d{args.d}" if args.d else ""
    for i, test in enumerate((f"pp{args.prompt}{at}", f"tg{args.gen}{at}")):
        a = max(r[i] for r in ours)
        line = f"{test:>12}  llamay cpu {a:8.1f} tok/s"
        for name, rows in engines.items():
            if name != "llamay cpu":
                b = max(r[i] for r in rows)
                line += f"   {name} {b:8.1f} tok/s ({a / b:.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
