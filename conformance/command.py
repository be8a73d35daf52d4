"""`llamay conformance`: check backends against reference; print the table; record the result."""
from __future__ import annotations

import argparse
import json
import sys


def configure(p: argparse.ArgumentParser) -> None:
    from llamay_core.cli.args import flag

    flag(p, "backend", default="all", help="backend name, or all (default)")
    p.add_argument("-m", "--model", "-model", dest="model", default="smollm2:135m",
                   help="model name or .gguf path for the model level (default smollm2:135m)")
    flag(p, "o", dest="output", choices=("md", "json", "html"), default="md",
         help="report format; html writes one self-contained page to -out")
    flag(p, "out", default="llamay-conformance.html", metavar="FILE", help="where -o html writes its page")
    flag(p, "case", action="append", default=[], metavar="ID",
         help="rerun one op case by id (op/type/shape/sSEED); repeatable; skips the model level")
    flag(p, "level", choices=("all", "op", "model"), default="all",
         help="op level, model level or both (only both writes a record)")
    flag(p, "full", action="store_true", help="model level over 1,024 scored positions and more greedy prompts")
    flag(p, "seed", type=int, default=0, help="seed of the op grid's random inputs")
    flag(p, "require", default="", metavar="NAMES",
         help="comma-separated backends that must be checked here: fail if one is skipped (CI)")


def run(args: argparse.Namespace) -> int:
    from llamay_core.plugins_runtime.manager import get_registry
    from llamay_conformance.model_level import Effort
    from llamay_conformance.case_progress import CaseProgress
    from llamay_conformance.runner import Conformance

    registry = get_registry()
    required = [n for n in args.require.split(",") if n]
    for name in required:
        registry.backend_info(name)  # an unknown name is a usage error, not a silent pass
    if args.backend == "all":
        names = sorted(registry.backends, key=lambda n: (-registry.backends[n].priority, n))
    else:
        registry.backend_info(args.backend)
        names = [args.backend]
    progress = CaseProgress()
    suite = Conformance(model=args.model, effort=Effort.full() if args.full else Effort(), seed=args.seed,
                        create=progress.create)
    reports = []
    ops, model = args.level in ("all", "op"), args.level in ("all", "model") and not args.case
    levels = " and ".join(x for x, on in (("ops", ops), ("model", model)) if on)
    for i, name in enumerate(names):
        with progress.checking(name, f"conformance {i + 1}/{len(names)}: {name} ({levels})") as bar:
            report = suite.check(name, ops=ops, model=model, case_ids=args.case)
        reports.append(report)
        if args.output == "md":
            bar.write(report.markdown(), file=sys.stdout)
    if args.output == "json":
        json.dump([r.as_json() for r in reports], sys.stdout, indent=1)
        print()
    if args.output == "html":
        write_html(reports, args.out)
    checked = [r for r in reports if not r.skipped and not r.is_reference]
    failed = [r.backend for r in checked if not r.passed]
    skipped_required = [f"{r.backend} ({r.skipped})" for r in reports if r.skipped and r.backend in required]
    skipped_required += [f"{n} (not selected by -backend)" for n in required if n not in names]
    if skipped_required:
        print(f"conformance: FAIL: required backends were not checked: {', '.join(skipped_required)}",
              file=sys.stderr)
    if args.output in ("md", "html"):
        skipped = [f"{r.backend} ({r.skipped})" for r in reports if r.skipped]
        reference = " (reference is the reference, not counted)" if any(r.is_reference for r in reports) else ""
        print(f"conformance: {len(checked) - len(failed)}/{len(checked)} backends pass{reference}"
              + (f"; FAIL: {', '.join(failed)}" if failed else "")
              + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
    if failed or skipped_required:
        return 1
    return 0 if checked or names == ["reference"] else 1


def write_html(reports: list, path: str) -> None:
    from llamay_conformance.html_report import html_page
    from llamay_core.errors import UsageError

    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(html_page(reports))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    print(f"wrote {path}")
