"""Argument parsing in llamay's style: single-dash long flags with double-dash aliases.

Flags match exactly: no prefix matching and no glued short options, so llama.cpp's `-ngl 99`
is never read as `-n gl`. Errors are one line on stderr and exit code 2, never a usage dump or a
traceback; an unknown flag gets a "did you mean".
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, NoReturn, Sequence

KV_NAMES = {"f32": "f32", "f16": "f16", "vq8": "vq8", "q8_0": "vq8"}  # llama.cpp's -ctk/-ctv names too


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows every default, unless the help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        if action.default is None or action.default is False:
            shown = "off" if action.nargs == 0 else "none"
        elif action.default == []:
            shown = "none"
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})".strip()


class OneLineArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        choice = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$", message)
        if choice:
            # Python < 3.12.8 quotes the choices, later versions do not
            options = re.findall(r"'([^']*)'", choice.group(3)) or [o.strip() for o in choice.group(3).split(",")]
            close = difflib.get_close_matches(choice.group(2), options, n=1)
            hint = f"did you mean {close[0]}?" if close else f"choose from {', '.join(options)}"
            what = "command" if choice.group(1) == "COMMAND" else f"value for {choice.group(1)}"
            message = f"unknown {what} {choice.group(2)!r} ({hint})"
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # argparse would read `-ngl` as `-n gl` and `-sys` as `-system`: no partial matches at all.
        return []

    def unknown_arguments(self, extras: Sequence[str]) -> NoReturn:
        """One line for the first argument nobody claimed, with the closest flag when there is one."""
        first = extras[0]
        if not first.startswith("-") or first[1:2].isdigit():
            self.error(f"unexpected argument {first!r}")
        name = first.split("=", 1)[0]
        options = [s for a in self._actions for s in a.option_strings]
        close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
        if not close and name.startswith("--"):
            close = difflib.get_close_matches(name[1:], options, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f" (see {self.prog} -h)"
        self.error(f"unknown flag {name}{hint}")


def flag(parser: argparse.ArgumentParser, name: str, *short: str, **kwargs: Any) -> None:
    """Add `-name` with its `--name` alias (and any extra short spellings)."""
    parser.add_argument(f"-{name}", f"--{name}", *short, **kwargs)


class HuggingFaceModel(argparse.Action):
    """llama.cpp's -hf OWNER/REPO[:QUANT] and -hfr OWNER/REPO + -hff FILE, as an `hf:` model name."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        repo = getattr(namespace, "hf_repo", None) or getattr(namespace, "hf_repo_id", None)
        file = getattr(namespace, "hf_file", None)
        if repo and file:
            namespace.model = f"hf:{repo.split(':')[0]}/{file}"
        elif repo:
            namespace.model = f"hf:{repo}"


class AcceptedAndIgnored(argparse.Action):
    """A llama.cpp flag with no meaning here: accepted, with a note saying why it changes nothing."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = f"{option_string} {values}" if values not in (None, []) else str(option_string)
        sys.stderr.write(f"note: {given} ignored: {self.help}\n")


def model_name(text: str) -> str:
    """A known model's canonical name (`SmolLM2` -> `smollm2:135m`); anything else as typed."""
    from llamay_core.files.model_names import canonical_name

    return canonical_name(text) or text


def model_flag(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """-m/--model, llama.cpp's Hugging Face spellings (-hf, -hfr, -hff) and its -ngl."""
    from llamay_core.files.model_names import DEFAULT_MODEL

    parser.add_argument("-m", "--model", "-model", type=model_name, default=None if required else DEFAULT_MODEL,
                        help=f"a .gguf path or a model name, any case; a family alone picks its default size "
                             f"(default {DEFAULT_MODEL})")
    parser.add_argument("-hf", "--hf-repo", "-hf-repo", dest="hf_repo_id", action=HuggingFaceModel, default=None,
                        metavar="OWNER/REPO[:QUANT]", help="a GGUF from the Hugging Face hub, as llama.cpp's -hf")
    parser.add_argument("-hfr", dest="hf_repo", action=HuggingFaceModel, default=None, metavar="OWNER/REPO",
                        help="Hugging Face repository (with -hff)")
    parser.add_argument("-hff", "--hf-file", "-hf-file", dest="hf_file", action=HuggingFaceModel, default=None,
                        metavar="FILE", help="file in the -hfr/-hf repository")
    parser.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", "-gpu-layers", dest="gpu_layers",
                        action=AcceptedAndIgnored, default=None, metavar="N",
                        help="llamay places the whole model on one backend (choose it with -backend)")


def backend_flag(parser: argparse.ArgumentParser) -> None:
    flag(parser, "backend", default=None, help="backend name (default: the best trusted one)")


class KvType(argparse.Action):
    """-kv, or llama.cpp's -ctk/-ctv, which must agree: llamay keeps K and V in one dtype."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        kv = KV_NAMES.get(str(values).lower())
        if kv is None:
            parser.error(f"argument {option_string}: unknown KV type {values!r} (choose from f32, f16, vq8 or q8_0)")
        earlier = getattr(namespace, "kv_given_by", None)
        if earlier and earlier[1] != kv and option_string in ("-ctk", "-ctv", "--cache-type-k", "--cache-type-v"):
            parser.error(f"{earlier[0]} {earlier[1]} and {option_string} {kv} differ: "
                         "llamay keeps K and V in one dtype")
        namespace.kv_given_by = (option_string, kv)
        namespace.kv = kv


def kv_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-kv", "--kv", action=KvType, default="f32", help="KV cache dtype: f32, f16, vq8")
    parser.add_argument("-ctk", "--cache-type-k", dest="kv", action=KvType, default="f32",
                        help="as llama.cpp: f32, f16 or q8_0 (= vq8); must equal -ctv")
    parser.add_argument("-ctv", "--cache-type-v", dest="kv", action=KvType, default="f32",
                        help="as llama.cpp: f32, f16 or q8_0 (= vq8); must equal -ctk")


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


def depth_list(text: str) -> list[int]:
    """Comma-separated numbers >= 0 (`llamay bench -d 0,1000,4096`, as llama-bench's -d): each
    once, in the order given."""
    depths: list[int] = []
    for part in text.split(","):
        value = non_negative_int(part.strip())
        if value not in depths:
            depths.append(value)
    return depths


def tcp_port(text: str) -> int:
    """A TCP port: 0 (any free one) to 65535."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {value}")
    return value


def n_predict(text: str) -> int:
    """Tokens to generate: N >= 1, or -1 for "until the end of the text or the context" (as llama.cpp)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, or -1 for until the end, got {value}")
    return value
