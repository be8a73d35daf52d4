"""`python -m tests.backends.measure -m MODEL [-full] BACKEND...`: the kld check alone, one table row per backend.

The numbers are those of the kld row of `llamay conformance [-full]` (same plan, same code);
running only that check, with reference computed once, is what made measuring the calibration
table in docs/backend-authors.md affordable on two cores. The test backends are registered.
"""
from __future__ import annotations

import argparse
import time

from llamay_conformance.model_level import Effort, ReferenceModel, check_kld
from llamay_core.engine.loader import load_model
from llamay_core.files.model_names import resolve_model
from tests.backends.plugin import register


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-m", dest="model", default="smollm2:135m")
    parser.add_argument("-full", action="store_true")
    parser.add_argument("backends", nargs="+")
    args = parser.parse_args()
    register()
    effort = Effort.full() if args.full else Effort()
    ref = ReferenceModel(resolve_model(args.model))
    print("| backend | positions | mean KLD | p99 KLD | same top-1 | decisive flips | widest flip margin | kld check | seconds |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in args.backends:
        start = time.time()
        try:
            model = load_model(ref.path, backend=name, n_ctx=512, n_seq=4)
            check = check_kld(model, ref, effort)
        except Exception as exc:  # one row per backend whatever happens: the row says what
            print(f"| {name} | — | — | — | — | — | — | raised {type(exc).__name__}: {str(exc)[:80]} | |", flush=True)
            continue
        m = check.metrics
        print(f"| {name} | {int(m['positions'])} | {m['mean_kld']:.2e} | {m['p99_kld']:.2e} | {m['same_top1']:.2%} "
              f"| {int(m['decisive_flips'])} | {m['widest_flip_margin']:.2f} | {'PASS' if check.passed else 'FAIL'} | {time.time() - start:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
