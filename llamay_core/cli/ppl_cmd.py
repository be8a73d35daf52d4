"""`llamay ppl`: perplexity of a model on a text file, as llama-perplexity computes it."""
from __future__ import annotations

import argparse
import sys

from llamay_core.cli.args import backend_flag, flag, model_flag, positive_int


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    p.add_argument("-f", "--file", "-file", required=True, help="text file to score")
    flag(p, "ctx", "-c", "--ctx-size", type=positive_int, default=512, help="tokens per chunk (default 512)")
    flag(p, "chunks", type=positive_int, default=None, help="score at most N chunks")
    backend_flag(p)


def run(args: argparse.Namespace) -> int:
    import llamay
    from llamay_core.engine.perplexity import perplexity
    from llamay_core.errors import UsageError
    from llamay_core.files.model_names import DEFAULT_MODEL
    from llamay_core.progress import PROGRESS

    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    PROGRESS.info("loading %s", args.model or DEFAULT_MODEL)
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, n_ctx=args.ctx, n_seq=1)

    def progress(i: int, running: float) -> None:
        sys.stderr.write(f"[{i}]{running:.4f} ")
        sys.stderr.flush()

    try:
        result = perplexity(m, text, n_ctx=args.ctx, max_chunks=args.chunks, progress=progress)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sys.stderr.write("\n")
    print(f"{m.display_name} · {m.backend_name} · {result.chunks} chunks of {args.ctx} · "
          f"{result.scored_tokens} tokens scored")
    print(f"Final estimate: PPL = {result.ppl:.4f} +/- {result.uncertainty:.5f}")
    return 0
