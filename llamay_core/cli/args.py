"""Argument parsing in llamay's style: single-dash long flags with double-dash aliases.

Errors are one line on stderr and exit code 2, never a usage dump or a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn


class OneLineArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def flag(parser: argparse.ArgumentParser, name: str, *short: str, **kwargs: Any) -> None:
    """Add `-name` with its `--name` alias (and any extra short spellings)."""
    parser.add_argument(f"-{name}", f"--{name}", *short, **kwargs)


def model_flag(parser: argparse.ArgumentParser, required: bool = True) -> None:
    from llamay_core.files.model_names import DEFAULT_MODEL

    parser.add_argument("-m", "--model", "-model", required=False, default=None if required else DEFAULT_MODEL,
                        help=f"a .gguf path or a model name (default {DEFAULT_MODEL})")


def backend_flag(parser: argparse.ArgumentParser) -> None:
    flag(parser, "backend", default=None, help="backend name (default: the best trusted one)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value
