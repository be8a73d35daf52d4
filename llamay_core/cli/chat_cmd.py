"""`llamay chat`: an interactive conversation (or turns read from piped stdin)."""
from __future__ import annotations

import argparse
import sys

from llamay_core.cli.args import model_flag
from llamay_core.cli.run_cmd import sampling_flags


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    sampling_flags(p, n_default=-1)
    p.epilog = ('in the chat: /bye leaves, /clear forgets the conversation, /system TEXT sets the system message, '
                '/? helps; end a line with \\ or wrap lines in """ to write several lines')


def chat(args: argparse.Namespace) -> int:
    """The REPL on the model the flags name; shared with `run -chat`/`-cnv` without a prompt."""
    from llamay_core.cli.chat_repl import repl
    from llamay_core.cli.chat_session import ChatSession
    from llamay_core.cli.run_cmd import load_for_cli, sampling_options
    from llamay_core.files.model_names import llamay_home

    m = load_for_cli(args)
    session = ChatSession(m, system=args.system, max_tokens=args.n, options=sampling_options(args))
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stdout.write(f"llamay chat · {m.display_name} on {m.backend_name} · /? for help, /bye to leave\n")
    try:
        return repl(session, sys.stdin, sys.stdout, interactive, stats=args.stats,
                    history=llamay_home() / "chat_history" if interactive else None)
    finally:
        session.close()


def run(args: argparse.Namespace) -> int:
    return chat(args)
