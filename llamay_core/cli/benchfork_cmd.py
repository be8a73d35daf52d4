"""`llamay benchfork`: questions forked from one warm prefix against the same ones from scratch."""
from __future__ import annotations

import argparse
import sys

from llamay_core.cli.args import backend_flag, flag, model_flag, positive_int


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    flag(p, "prompt", type=positive_int, default=2048, help="shared prefix tokens")
    flag(p, "questions", type=positive_int, default=32, help="questions asked of the prefix")
    flag(p, "gen", type=positive_int, default=32, help="tokens generated per answer")
    flag(p, "kv", default="f32", help="KV cache dtype")
    flag(p, "progress", action="store_true")
    backend_flag(p)


def run(args: argparse.Namespace) -> int:
    import llamay
    from llamay_core.bench.benchfork import benchfork
    from llamay_core.bench.gate import check_backend
    from llamay_core.bench.measure import fmt_seconds
    from llamay_core.files.model_names import DEFAULT_MODEL
    from llamay_core.progress import PROGRESS, slow_step

    PROGRESS.info("loading %s", args.model or DEFAULT_MODEL)
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, kv_dtype=args.kv,
                    n_ctx=args.prompt + 12 + args.gen + 16, n_seq=3)
    with slow_step(f"checking {m.backend_name} against reference (first use of this model)"):
        check_backend(m)  # raises (exit 3) before any number is printed
    progress = (lambda line: sys.stderr.write(line + "\n")) if args.progress else None
    r = benchfork(m, args.prompt, args.questions, args.gen, progress=progress)
    same = sum(a == b for a, b in zip(r.forked_tokens, r.scratch_tokens))
    print(f"llamay benchfork · {m.display_name} · {m.backend_name} · prefix {r.prefix_tokens} · "
          f"{r.questions} questions · {r.gen} tokens each · kv {m.kv_spec.dtype}")
    print(f"warm prefix   {fmt_seconds(r.warm_prefill_s)}  prefilled once")
    print(f"forked        {fmt_seconds(r.forked_s)}  {r.questions} questions from forks "
          f"({r.pages_allocated_by_forks} pages allocated in all)")
    print(f"from scratch  {fmt_seconds(r.scratch_s)}  {r.questions} questions, each prefilling the prefix")
    print(f"Forking is {r.ratio:.1f}x faster ({(r.warm_prefill_s + r.forked_s) and r.scratch_s / (r.warm_prefill_s + r.forked_s):.1f}x "
          f"counting the warm prefix); {same}/{r.questions} answers identical to scratch.")
    return 0
