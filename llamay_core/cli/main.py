"""The `llamay` entry point: builds the subcommand table and turns user errors into one line."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from llamay_core.cli.args import DefaultsHelpFormatter, OneLineArgumentParser

# name -> (help, module, configure, run): modules are imported only when their command runs.
BUILTIN_COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "run": ("generate text from a prompt", "llamay_core.cli.run_cmd", "configure", "run"),
    "chat": ("talk with a model (interactive; reads turns from stdin when piped)", "llamay_core.cli.chat_cmd",
             "configure", "run"),
    "version": ("versions, backends and their conformance", "llamay_core.cli.version_cmd", "configure", "run"),
    "pull": ("fetch a model by name", "llamay_core.cli.pull_cmd", "configure_pull", "run_pull"),
    "models": ("list known models, their sizes and which are downloaded", "llamay_core.cli.pull_cmd",
               "configure_models", "run_models"),
    "rm": ("delete a downloaded model", "llamay_core.cli.pull_cmd", "configure_rm", "run_rm"),
    "ppl": ("perplexity on a text file", "llamay_core.cli.ppl_cmd", "configure", "run"),
    "benchfork": ("questions forked from one prefix vs from scratch", "llamay_core.cli.benchfork_cmd", "configure", "run"),
    "bench": ("measure prefill, decode and the state engine", "llamay_core.cli.bench_cmd", "configure", "run"),
    "serve": ("an OpenAI-compatible server", "llamay_core.cli.serve_cmd", "configure", "run"),
}


# ollama's names for the same commands
ALIASES: dict[str, tuple[str, ...]] = {"models": ("list", "ls")}


def build_parser() -> tuple[OneLineArgumentParser, dict[str, Callable[..., int]]]:
    """The parser (its subcommand parsers in `parser.commands`) and each command's run function."""
    import importlib

    from llamay_core.plugins_runtime.manager import get_registry
    from llamay_core.version import __version__

    parser = OneLineArgumentParser(prog="llamay", description="Local LLM inference with pluggable backends.")
    parser.add_argument("--version", "-version", action="version", version=f"llamay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    runners: dict[str, Callable[..., int]] = {}
    commands: dict[str, argparse.ArgumentParser] = {}
    for name, (help_text, module_name, configure, run) in BUILTIN_COMMANDS.items():
        module = importlib.import_module(module_name)
        aliases = ALIASES.get(name, ())
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter,
                           aliases=list(aliases))
        getattr(module, configure)(p)
        for key in (name, *aliases):
            runners[key], commands[key] = getattr(module, run), p
    for name, info in sorted(get_registry().commands.items()):
        if name in runners:
            continue
        p = sub.add_parser(name, help=info.help, description=info.help, formatter_class=DefaultsHelpFormatter)
        info.configure(p)
        runners[name], commands[name] = info.run, p
    for p in set(commands.values()):
        if "-q" not in p._option_string_actions:
            p.add_argument("-q", "--quiet", "-quiet", action="store_true",
                           help="no progress lines or bars on stderr (warnings still show)")
    parser.commands = commands  # type: ignore[attr-defined]
    return parser, runners


def main(argv: list[str] | None = None) -> int:
    from llamay_core.cli.status_lines import status_lines
    from llamay_core.errors import LlamayError

    parser, runners = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if words and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version", "-version"):
        # llama-cli's habit, `llamay -m MODEL -p TEXT`: say where the command goes
        parser.error(f"a command comes first, e.g. llamay run {' '.join(words[:4])} (see llamay -h)")
    args, extras = parser.parse_known_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if extras:
        parser.commands[args.command].unknown_arguments(extras)
    if getattr(args, "hf_file", None) and not str(args.model or "").startswith("hf:"):
        parser.commands[args.command].error("-hff FILE needs the repository too: -hf OWNER/REPO or -hfr OWNER/REPO")
    try:
        with status_lines(quiet=getattr(args, "quiet", False)):
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
