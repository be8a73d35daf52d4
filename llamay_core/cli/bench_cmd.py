"""`llamay bench`: prefill, decode and ttft (and the state engine with -forks), best of -reps."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

from llamay_core.cli.args import backend_flag, depth_list, flag, kv_flag, model_flag, non_negative_int, positive_int
from llamay_core.engine.pass_size import DEFAULT_UBATCH


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    flag(p, "prompt", "-p", "--n-prompt", type=non_negative_int, default=512, help="prompt tokens (0 skips prefill)")
    flag(p, "gen", "-n", "--n-gen", type=non_negative_int, default=128, help="generated tokens (0 skips decode)")
    flag(p, "reps", "-r", type=positive_int, default=3, help="repetitions; the best is reported")
    flag(p, "threads", "-t", type=positive_int, default=None, help="threads (default: physical cores)")
    kv_flag(p)
    flag(p, "ubatch", "-ub", type=positive_int, default=DEFAULT_UBATCH, help="prefill tile width")
    flag(p, "o", default="md", choices=["md", "json", "jsonl", "csv", "sql"], help="output format")
    flag(p, "pg", default=None, help="P,G: a P-token prompt then G generated tokens, timed together")
    flag(p, "d", "-depth", type=depth_list, default=[0],
         help="measure with DEPTH tokens already cached; a comma list (0,1000,4096) measures each")
    flag(p, "sweep", nargs="?", const="ub", choices=["ub", "prompt"], default=None,
         help="prefill across tile widths (-sweep or -sweep ub) or prompt lengths up to -prompt (-sweep prompt)")
    flag(p, "plot", default=None, metavar="FILE.png", help="draw the -sweep as a PNG (needs llamay[plot])")
    flag(p, "progress", action="store_true", help="a line per repetition on stderr, even when it is not a terminal")
    flag(p, "forks", type=non_negative_int, default=0, help="also measure fork xN, snapshot and restore")
    flag(p, "spec", choices=["ngram"], default=None, help="compare speculative (ngram) against plain decoding")
    flag(p, "spec-draft-max", dest="spec_draft_max", type=positive_int, default=8, help="tokens drafted per pass")
    backend_flag(p)


def default_threads() -> int:
    """Physical cores: hyper-threads share a core's vector units and only contend."""
    try:
        cores = set()
        with open("/proc/cpuinfo") as f:
            phys = core = None
            for line in f:
                if line.startswith("physical id"):
                    phys = line.split(":")[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":")[1].strip()
                    cores.add((phys, core))
        if cores:
            return min(len(cores), len(os.sched_getaffinity(0)))
    except (OSError, AttributeError):
        pass
    return os.cpu_count() or 1


def run(args: argparse.Namespace) -> int:
    import llamay
    from llamay_core.bench.gate import check_backend
    from llamay_core.bench.measure import Bench, Sample
    from llamay_core.bench.report import FORMATS, markdown
    from llamay_core.host_info import cpu_features
    from llamay_core.errors import UsageError
    from llamay_core.files.model_names import DEFAULT_MODEL
    from llamay_core.progress import PROGRESS, progress_bar, slow_step
    from llamay_core.version import __version__

    pg = None
    if args.pg:
        try:
            pg = tuple(int(x) for x in args.pg.split(","))
            assert len(pg) == 2 and pg[0] >= 1 and pg[1] >= 1
        except (ValueError, AssertionError):
            raise UsageError(f"-pg expects P,G with both >= 1, got {args.pg!r}") from None
    if args.plot and not args.sweep:
        raise UsageError("-plot draws a sweep: add -sweep (tile widths) or -sweep prompt (prompt lengths)")
    if args.sweep and not args.prompt:
        raise UsageError("-sweep measures prefill: it needs -prompt N > 0")
    threads = args.threads or default_threads()
    deepest = max(args.d)
    n_ctx = max(args.prompt + deepest, deepest + args.gen + 1, (pg[0] + pg[1]) if pg else 0, 256) + 16
    t0 = time.perf_counter()
    PROGRESS.info("loading %s", args.model or DEFAULT_MODEL)
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, n_ctx=n_ctx, kv_dtype=args.kv,
                    ubatch=args.ubatch, n_seq=max(2, args.forks + 2))
    load_seconds = time.perf_counter() - t0
    m.backend.set_threads(threads)
    with slow_step(f"checking {m.backend_name} against reference (first use of this model)"):
        check_backend(m)  # raises (exit 3) before any number is printed

    widths = [w for w in (32, 64, 128, 256, 512) if w <= max(args.prompt, 32)] if args.sweep == "ub" else []
    lengths = sweep_lengths(args.prompt) if args.sweep == "prompt" else []
    steps = args.reps * (len(args.d) * (bool(args.prompt) + bool(args.gen)) + bool(pg) + len(widths) + len(lengths))
    bar = progress_bar(steps, "bench", unit="run")
    progress = repetition_progress(bar, args.progress)
    if args.spec:
        return _bench_speculative(m, args, progress)
    bench = Bench(m, reps=args.reps, progress=progress)
    warm = m.context()  # warm-up: first calls pay one-off costs that are not part of any rate
    warm_t0 = time.perf_counter()
    warm.extend(list(range(1, 9)))
    warm.extend([1])
    warm.close()
    warmup_seconds = time.perf_counter() - warm_t0

    samples: list[Sample] = []
    prefills: list[Sample] = []
    for depth in args.d:  # as llama-bench: each depth's prompt, then its decode
        if args.prompt:
            prefills.append(bench.prefill(args.prompt, depth=depth))
            samples.append(prefills[-1])
        if args.gen:
            samples.append(bench.decode(args.gen, depth=depth))
    for depth, pp in zip(args.d, prefills):
        samples.append(Sample("ttft" + (f"@d{depth}" if depth else ""), "ttft", args.prompt, seconds=list(pp.seconds),
                              note="time to first token"))
    prefill = prefills[0] if prefills else None
    if pg:
        samples.append(bench.prompt_then_generate(*pg))
    if widths:
        samples.extend(bench.sweep(args.prompt, widths))
    if lengths:
        samples.extend(bench.sweep_prompt(lengths))
    bar.close()
    extra_lines: list[str] = []
    if args.forks:
        if not prefill:
            raise UsageError("-forks needs a prompt (-prompt N > 0)")
        state = bench.state_engine(args.prompt, args.forks, prefill.best)
        samples.extend(state)
        extra_lines.append(f"Restoring a {args.prompt}-token context is {state[2].extra['speedup']:.1f}x "
                           "faster than recomputing it.")
    describe = m.backend.describe()
    extra_lines = list(m.backend.bench_lines()) + extra_lines
    compile_s = m.backend.compile_seconds
    extra_lines.append(
        f"load {load_seconds:.2f}s" + (f" (kernel compile {compile_s:.2f}s)" if compile_s else "")
        + f" · warm-up {warmup_seconds:.2f}s · neither counted in any rate")
    info = m.info
    cond = {
        "llamay_version": __version__, "model_name": m.display_name, "model_file": os.path.basename(info["path"]),
        "model_hash": info["model_hash"], "architecture": info["architecture"], "backend": m.backend_name,
        "device": m.backend.probe().device, "threads": threads,
        "kernels": describe.get("kernels", "+".join(f for f in cpu_features() if f in ("avx2", "fma", "neon", "i8mm")) or "generic"),
        "matmul": describe.get("matmul", m.backend_name), "gemm": describe.get("gemm", "numpy blas"),
        "repack": describe.get("repack", "off"), "kv_dtype": m.kv_spec.dtype,
        "kv_bytes_per_token": m.kv_spec.bytes_per_token(), "weights_mib": info["weights_bytes"] / 2**20,
        "n_ctx": info["context_length"], "n_prompt": args.prompt, "n_gen": args.gen,
        "n_depth": args.d[0] if len(args.d) == 1 else ",".join(map(str, args.d)),
        "ubatch": m.forward.ubatch, "reps": args.reps, "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    formatter = FORMATS[args.o]
    if args.plot:
        from llamay_core.bench.plot import plot_sweep

        extra_lines.append(f"plot: {plot_sweep(samples, cond, args.plot)}")
    print(markdown(cond, samples, extra_lines) if formatter is None else formatter(cond, samples))
    return 0


def sweep_lengths(n_prompt: int) -> list[int]:
    """Prompt lengths doubling from 16 up to (and ending at) `n_prompt`."""
    lengths = []
    n = 16
    while n < n_prompt:
        lengths.append(n)
        n *= 2
    return lengths + [n_prompt]


def repetition_progress(bar: Any, lines: bool) -> Callable[[str], None]:
    """Bench's per-repetition callback: advance the bar (and print the line with -progress)."""
    def progress(line: str) -> None:
        bar.set_description(line.split(" ")[0])
        bar.set_postfix_str(line.split(": ", 1)[-1])
        bar.update(1)
        if lines:
            bar.write(line, file=sys.stderr)
    return progress


def _bench_speculative(m, args: argparse.Namespace, progress) -> int:
    """`-spec ngram`: plain against speculative decoding of -gen tokens on two prompts."""
    from llamay_core.speculative import SpeculativeConfig
    from llamay_core.speculative.bench import bench_speculative, report_lines

    config = SpeculativeConfig(args.spec, draft_max=args.spec_draft_max)
    results = bench_speculative(m, config, n_gen=args.gen or 96, reps=args.reps, progress=progress)
    print(f"{m.display_name} · backend {m.backend_name} · generate {args.gen or 96} · best of {args.reps}")
    print("\n".join(report_lines(results)))
    return 0
