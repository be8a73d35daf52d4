"""Benchmark the cpu backend's GGML kernels: decode GB/s and prefill GFLOP/s.

    python benchmarks/cpu_kernels.py            # full table (about 2-3 minutes)
    python benchmarks/cpu_kernels.py --quick    # fewer cases and repetitions

Decode rate is weight bytes read per second (the kernels stream each weight byte once
per token); prefill rate is 2*rows*cols*T / time. Every figure is the best of several
timed runs, because the machine may be shared. Real tensors come from
~/.cache/llamay/models/{smollm2-135m,qwen2.5-coder-0.5b}.gguf when present; formats no
model uses are benchmarked on random valid blocks.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import time
from pathlib import Path

import numpy as np

try:
    import llamay_backends.cpu.kernels as K
except ImportError:  # running from a checkout without `pip install -e .`
    import importlib.util

    _root = Path(__file__).resolve().parents[1]
    _spec = importlib.util.spec_from_file_location(
        "llamay_backends", _root / "backends" / "__init__.py", submodule_search_locations=[str(_root / "backends")]
    )
    sys.modules["llamay_backends"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["llamay_backends"])
    import llamay_backends.cpu.kernels as K

import numba

from llamay_backends.cpu import isa

MODELS = Path.home() / ".cache" / "llamay" / "models"


# ------------------------------------------------------------------ helpers


# Clock for timings. With one thread all work runs on the calling thread (Numba's pool
# and OpenBLAS both run a 1-thread region inline), so its CPU time is immune to another
# process taking the core; with more threads only wall time means anything.
_CLOCK = {"clock": time.perf_counter}


def _idle_fraction(dt: float = 0.2) -> float:
    """Share of all cores idle over `dt` seconds (Linux /proc/stat; 1.0 elsewhere)."""
    def read():
        v = [int(f) for f in open("/proc/stat").readline().split()[1:]]
        return v[3] + v[4], sum(v)

    try:
        i0, t0 = read()
        time.sleep(dt)
        i1, t1 = read()
    except OSError:
        return 1.0
    return (i1 - i0) / max(1, t1 - t0)


def best_time(fn, min_run_s: float = 0.02, reps: int = 7) -> float:
    """Best per-call seconds over `reps` runs of enough calls to last `min_run_s`.

    Multi-thread runs first wait (up to `_CLOCK["idle_wait"]` s) for the cores to be
    idle: a parallel region whose second thread is descheduled waits a whole scheduler
    slice (~6 ms), so one busy neighbour turns every figure into noise.
    """
    clock = _CLOCK["clock"]
    wait = _CLOCK.get("idle_wait", 0.0) if numba.get_num_threads() > 1 else 0.0
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(min_run_s / one))
    best = float("inf")
    for _ in range(reps):
        deadline = time.perf_counter() + wait
        while wait and time.perf_counter() < deadline and _idle_fraction() < 0.9:
            pass
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n)
    return best


def _openblas():
    # numpy's bundled OpenBLAS, to pin BLAS threads like Numba's (best effort)
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            if hasattr(lib, name):
                return getattr(lib, name)
    return None


_BLAS_SET = _openblas()


def set_threads(n: int) -> None:
    numba.set_num_threads(n)
    if _BLAS_SET is not None:
        _BLAS_SET(n)
    use_cpu = n == 1 and _CLOCK.get("cpu_for_one", False)
    _CLOCK["clock"] = time.thread_time if use_cpu else time.perf_counter


def memory_bandwidth() -> float:
    """GB/s of numpy summing a 1 GiB float32 array (one thread), best of 5."""
    a = np.ones(1 << 28, np.float32)
    set_threads(1)
    t = best_time(lambda: a.sum(), min_run_s=0.0, reps=5)
    return a.nbytes / t / 1e9


def random_weights(code: int, rows: int, cols: int, rng) -> np.ndarray:
    """Random valid raw rows of format `code`: random bytes, f16 scale fields made finite."""
    if code == K.F32:
        return rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8)
    if code == K.F16:
        return rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint8)
    if code == K.BF16:
        return (rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    f16_fields = {K.Q4_0: (0,), K.Q4_1: (0, 2), K.Q5_0: (0,), K.Q5_1: (0, 2), K.Q8_0: (0,),
                  K.Q2_K: (80, 82), K.Q3_K: (108,), K.Q4_K: (0, 2), K.Q5_K: (0, 2), K.Q6_K: (208,)}[code]
    elems, nbytes = K.formats.BLOCK[code]
    nb = cols // elems
    raw = rng.integers(0, 256, (rows, nb, nbytes), dtype=np.uint8)
    for off in f16_fields:
        raw[:, :, off:off + 2] = rng.uniform(-0.05, 0.05, (rows, nb)).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, -1)


def load_tensors(path: Path):
    """{name: (code, uint8 rows)} for the 2-D tensors of supported formats in a GGUF file."""
    import gguf

    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        name = t.tensor_type.name
        if name in K.TYPE_CODE and len(t.shape) == 2:
            code = K.TYPE_CODE[name]
            out[t.name] = (code, K.raw_rows(np.asarray(t.data), code))
    return out


# ------------------------------------------------------------------ sections


def decode_cases(quick: bool):
    cases = []
    rng = np.random.default_rng(0)
    s_path, q_path = MODELS / "smollm2-135m.gguf", MODELS / "qwen2.5-coder-0.5b.gguf"
    models = {}
    if s_path.exists():
        models["smollm2"] = load_tensors(s_path)
        s = models["smollm2"]
        cases += [("smollm2 attn_q", *s["blk.0.attn_q.weight"]), ("smollm2 ffn_up", *s["blk.0.ffn_up.weight"]),
                  ("smollm2 ffn_down", *s["blk.0.ffn_down.weight"]), ("smollm2 output(tied)", *s["token_embd.weight"])]
    if q_path.exists():
        models["qwen"] = load_tensors(q_path)
        q = models["qwen"]
        q4k = next(n for n, (c, _) in q.items() if c == K.Q4_K)
        cases += [("qwen ffn_up", *q["blk.0.ffn_up.weight"]), ("qwen ffn_down", *q["blk.0.ffn_down.weight"]),
                  (f"qwen {q4k.removesuffix('.weight')}", *q[q4k])]
        if not quick:
            cases.append(("qwen output", *q["output.weight"]))
    seen = {c for _, c, _ in cases}
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"):
        code = K.TYPE_CODE[name]
        if code not in seen:
            cases.append((f"random {name}", code, random_weights(code, 4864, 896, rng)))
    return cases, models


def bench_decode(cases, threads, quick):
    print("\n## Decode: out = W @ x, weight GB/s (best of runs)")
    print("matvec = the strategy chosen per format (float or q8 column); q8 = x quantized to int8 per 32.")
    hdr = f"{'case':28s} {'type':5s} {'rows x cols':>13s} {'MiB':>6s} {'thr':>3s} {'float':>7s} {'q8':>7s} {'matvec':>7s} {'us':>8s}"
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(1)
    reps = 3 if quick else 7
    for label, code, w in cases:
        cols = K.row_elems(code, w.shape[1])
        x = rng.standard_normal(cols).astype(np.float32)
        out = np.empty(w.shape[0], np.float32)
        for th in threads:
            set_threads(th)
            tf = best_time(lambda: K.matvec_float(code, w, x, out), reps=reps)
            tq = best_time(lambda: K.matvec_q8(code, w, x, out), reps=reps) if code not in (K.F32, K.F16, K.BF16) else None
            tm = best_time(lambda: K.matvec(code, w, x, out), reps=reps)
            gb = lambda t: f"{w.nbytes / t / 1e9:7.2f}" if t else f"{'-':>7s}"
            print(f"{label:28s} {K.TYPE_NAME[code]:5s} {w.shape[0]:>6d}x{cols:<6d} {w.nbytes / 2**20:6.1f} {th:3d} {gb(tf)} {gb(tq)} {gb(tm)} {tm * 1e6:8.1f}")


def bench_grouped(cases, threads, quick):
    print("\n## A few tokens at once (decode batches, draft verification): ms per matmul")
    print("float = matmul_grouped (one dequantization per 32-weight run for up to 9 tokens, bit-identical")
    print("per token); int8 = matmul_grouped(int8=True) (one byte unpacking per run, integer dots per token,")
    print("bit-identical per token); int8 rows = matmul_q8 (each token's row dotted on its own).")
    hdr = f"{'case':28s} {'type':5s} {'thr':>3s} {'T':>3s} {'float':>8s} {'int8':>8s} {'int8 rows':>9s}"
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(2)
    reps = 3 if quick else 7
    for label, code, w in cases:
        if label.startswith("random") or label == "qwen output":
            continue
        cols = K.row_elems(code, w.shape[1])
        quantized = code not in (K.F32, K.F16, K.BF16)
        for th in threads:
            set_threads(th)
            for T in (1, 4, 8, 9):
                X = rng.standard_normal((T, cols)).astype(np.float32)
                OUT = np.empty((T, w.shape[0]), np.float32)
                tg = best_time(lambda: K.matmul_grouped(code, w, X, OUT), reps=reps)
                tq = best_time(lambda: K.matmul_grouped(code, w, X, OUT, int8=True), reps=reps) if quantized else None
                tr = best_time(lambda: K.matmul_q8(code, w, X, OUT), reps=reps) if quantized else None
                ms = lambda t, n=8: f"{t * 1e3:{n}.3f}" if t else f"{'-':>{n}s}"
                print(f"{label:28s} {K.TYPE_NAME[code]:5s} {th:3d} {T:3d} {ms(tg)} {ms(tq)} {ms(tr, 9)}")


def bench_model_sweep(models, threads, quick):
    print("\n## Decode, whole model: every weight matrix once per token (matvec), file order")
    print(f"{'model':10s} {'MiB':>6s} {'thr':>3s} {'ms/token':>9s} {'tok/s':>7s} {'GB/s':>7s}")
    rng = np.random.default_rng(2)
    for mname, tensors in models.items():
        mats = [(c, w) for n, (c, w) in tensors.items() if n != "token_embd.weight" or "output.weight" not in tensors]
        xs = [rng.standard_normal(K.row_elems(c, w.shape[1])).astype(np.float32) for c, w in mats]
        outs = [np.empty(w.shape[0], np.float32) for c, w in mats]
        nbytes = sum(w.nbytes for _, w in mats)

        def token():
            for (c, w), x, o in zip(mats, xs, outs):
                K.matvec(c, w, x, o)

        for th in threads:
            set_threads(th)
            t = best_time(token, min_run_s=0.05, reps=3 if quick else 5)
            print(f"{mname:10s} {nbytes / 2**20:6.1f} {th:3d} {t * 1e3:9.2f} {1 / t:7.1f} {nbytes / t / 1e9:7.2f}")


def bench_prefill(models, threads, quick, T=256):
    print(f"\n## Prefill: OUT = X @ W.T, T={T}, GFLOP/s (2*rows*cols*T / time)")
    print("(a) matmul: dequantize <=512-row tiles to f32 + BLAS sgemm   (b) matmul_q8: int8 X, integer block dots")
    print("(c) matmul_fused: float fused-dequant dot per token")
    cases = []
    if "smollm2" in models:
        cases.append(("smollm2 ffn_up", *models["smollm2"]["blk.0.ffn_up.weight"]))
    if "qwen" in models:
        cases.append(("qwen ffn_up", *models["qwen"]["blk.0.ffn_up.weight"]))
        if not quick:
            cases.append(("qwen ffn_down", *models["qwen"]["blk.0.ffn_down.weight"]))
    hdr = f"{'case':16s} {'type':5s} {'rows x cols':>13s} {'thr':>3s} {'(a) BLAS':>9s} {'(b) q8':>9s} {'(c) fused':>9s}"
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(3)
    for label, code, w in cases:
        cols = K.row_elems(code, w.shape[1])
        X = rng.standard_normal((T, cols)).astype(np.float32)
        OUT = np.empty((T, w.shape[0]), np.float32)
        flop = 2.0 * w.shape[0] * cols * T
        for th in threads:
            set_threads(th)
            ta = best_time(lambda: K.matmul(code, w, X, OUT), reps=3 if quick else 5)
            tb = best_time(lambda: K.matmul_q8(code, w, X, OUT), min_run_s=0.0, reps=3)
            tc = best_time(lambda: K.matmul_fused(code, w, X, OUT), min_run_s=0.0, reps=3)
            print(f"{label:16s} {K.TYPE_NAME[code]:5s} {w.shape[0]:>6d}x{cols:<6d} {th:3d} "
                  f"{flop / ta / 1e9:9.1f} {flop / tb / 1e9:9.1f} {flop / tc / 1e9:9.1f}")


def bench_prefill_tiles(models, threads):
    if "qwen" not in models:
        return
    code, w = models["qwen"]["blk.0.ffn_up.weight"]
    cols = K.row_elems(code, w.shape[1])
    rng = np.random.default_rng(4)
    print("\n## Prefill (a) tile size and small-T crossover, qwen ffn_up, GFLOP/s, 1 thread")
    th = 1
    set_threads(th)
    X = rng.standard_normal((256, cols)).astype(np.float32)
    OUT = np.empty((256, w.shape[0]), np.float32)
    flop = 2.0 * w.shape[0] * cols * 256
    row = []
    for tile in (32, 64, 128, 256, 512, 1024):
        t = best_time(lambda: K.matmul(code, w, X, OUT, tile_rows=tile), reps=3)
        row.append(f"tile {tile}: {flop / t / 1e9:.1f}")
    print(f"T=256, {th} threads: " + ", ".join(row))
    print(f"matmul uses the decode kernels for T <= SMALL_T = {K.SMALL_T}")
    print(f"{'T':>4s} {'BLAS tiles':>10s} {'q8':>8s} {'fused':>8s}")
    for T in (1, 2, 3, 4, 8, 16):
        X = rng.standard_normal((T, cols)).astype(np.float32)
        OUT = np.empty((T, w.shape[0]), np.float32)
        flop = 2.0 * w.shape[0] * cols * T
        ta = best_time(lambda: _matmul_blas(code, w, X, OUT), reps=3)
        tb = best_time(lambda: K.matmul_q8(code, w, X, OUT), reps=3)
        tc = best_time(lambda: K.matmul_fused(code, w, X, OUT), reps=3)
        print(f"{T:4d} {flop / ta / 1e9:10.1f} {flop / tb / 1e9:8.1f} {flop / tc / 1e9:8.1f}")


def _matmul_blas(code, w, X, OUT):
    # the tile + BLAS path even below SMALL_T, for the crossover table
    old = K._api.SMALL_T
    K._api.SMALL_T = 0
    try:
        K.matmul(code, w, X, OUT)
    finally:
        K._api.SMALL_T = old


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--wall", action="store_true", help="time 1-thread runs by wall clock too (default: thread CPU time)")
    ap.add_argument("--only", choices=["decode", "grouped", "sweep", "prefill"], default=None,
                    help="run one section only")
    ap.add_argument("--idle-wait", type=float, default=5.0,
                    help="seconds a multi-thread run may wait for idle cores before timing (default 5)")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    _CLOCK["cpu_for_one"] = not args.wall
    _CLOCK["idle_wait"] = args.idle_wait

    print("# llamay cpu kernels benchmark")
    print(f"cpus: {os.cpu_count()}, numba {numba.__version__}, numpy {np.__version__}, "
          f"kernel level: {isa.describe(set(K.FEATURES))} (LLAMAY_CPU_ISA={isa.requested()}), VNNI: {K.HAS_VNNI}, "
          f"AVX2 dots: {K.HAS_AVX2}, load average at start: {os.getloadavg()[0]:.2f}")
    print(f"memory bandwidth (numpy sum of 1 GiB, 1 thread): {memory_bandwidth():.1f} GB/s")
    print("timing: best of runs; 1-thread rows by " + ("wall clock" if args.wall else "thread CPU time (robust to a shared machine)")
          + f", multi-thread rows by wall clock after waiting up to {args.idle_wait:g} s for idle cores")
    cases, models = decode_cases(args.quick)
    print(f"threading layer: {_threading_layer()}")
    run = lambda section: args.only in (None, section)
    if run("decode"):
        bench_decode(cases, threads, args.quick)
    if run("grouped"):
        bench_grouped(cases, threads, args.quick)
    if run("sweep"):
        bench_model_sweep(models, threads, args.quick)
    if run("prefill"):
        bench_prefill(models, threads, args.quick)
        if not args.quick:
            bench_prefill_tiles(models, threads)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f} (above ~0.5 means another process shared the cores)")
    return 0


def _threading_layer() -> str:
    x = np.zeros(32, np.float32)
    K.matvec_float(K.F32, np.zeros((1, 128), np.uint8), x, np.zeros(1, np.float32))
    try:
        return numba.threading_layer()
    except ValueError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
