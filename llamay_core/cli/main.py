"""The `llamay` entry point: builds the subcommand table and turns user errors into one line."""
from __future__ import annotations

import sys
from typing import Callable

from llamay_core.cli.args import OneLineArgumentParser

# name -> (help, module, configure, run): modules are imported only when their command runs.
BUILTIN_COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "run": ("generate text from a prompt", "llamay_core.cli.run_cmd", "configure", "run"),
    "version": ("versions, backends and their conformance", "llamay_core.cli.version_cmd", "configure", "run"),
    "pull": ("fetch a model by name", "llamay_core.cli.pull_cmd", "configure_pull", "run_pull"),
    "models": ("list known models", "llamay_core.cli.pull_cmd", "configure_models", "run_models"),
    "ppl": ("perplexity on a text file", "llamay_core.cli.ppl_cmd", "configure", "run"),
    "benchfork": ("questions forked from one prefix vs from scratch", "llamay_core.cli.benchfork_cmd", "configure", "run"),
    "bench": ("measure prefill, decode and the state engine", "llamay_core.cli.bench_cmd", "configure", "run"),
    "serve": ("an OpenAI-compatible server", "llamay_core.cli.serve_cmd", "configure", "run"),
}


def build_parser() -> tuple[OneLineArgumentParser, dict[str, Callable[..., int]]]:
    import importlib

    from llamay_core.plugins_runtime.manager import get_registry

    parser = OneLineArgumentParser(prog="llamay", description="Local LLM inference with pluggable backends.",
                                   allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    runners: dict[str, Callable[..., int]] = {}
    for name, (help_text, module_name, configure, run) in BUILTIN_COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        getattr(module, configure)(p)
        runners[name] = getattr(module, run)
    for name, info in sorted(get_registry().commands.items()):
        if name in runners:
            continue
        p = sub.add_parser(name, help=info.help, allow_abbrev=False)
        info.configure(p)
        runners[name] = info.run
    return parser, runners


def main(argv: list[str] | None = None) -> int:
    from llamay_core.errors import LlamayError

    parser, runners = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(runners[args.command](args) or 0)
    except LlamayError as exc:
        sys.stderr.write(f"llamay {args.command}: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
