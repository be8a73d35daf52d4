"""The chat loop: read a turn, stream the reply. A terminal gets line editing and history
(readline); piped stdin is read as turns, one per line, with the same multi-line rules.

Multi-line input: end a line with `\\` to continue it, or wrap lines in `\"\"\"` (as ollama).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator, TextIO

from llamay_core.cli.chat_session import ChatSession
from llamay_core.errors import LlamayError

HELP = """commands:
  /bye            leave
  /clear          forget the conversation (the system message stays)
  /system TEXT    set the system message (/system alone removes it)
  /?              this help
multi-line input: end a line with \\ to continue it, or wrap lines in \"\"\""""
PROMPT, MORE = ">>> ", "... "


def terminal_lines(history: Path | None) -> Iterator[tuple[str, str]]:
    """(prompt, line) pairs: lines typed at a terminal, with readline's editing and history."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input() still works
        readline = None
    if readline is not None and history is not None:
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    prompt = PROMPT
    try:
        while True:
            try:
                line = input(prompt)
            except KeyboardInterrupt:  # Ctrl-C at the prompt drops the line, as in a shell
                sys.stdout.write("\n(/bye or Ctrl-D to leave)\n")
                prompt = PROMPT
                continue
            prompt = yield line
    finally:
        if readline is not None and history is not None:
            try:
                history.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(history)
            except OSError:
                pass


def read_turns(next_line: Callable[[str], str | None]) -> Iterator[str]:
    """Whole turns from lines (None ends the input), joining `\\` continuations and \"\"\" blocks."""
    while True:
        line = next_line(PROMPT)
        if line is None:
            return
        if line.lstrip().startswith('"""'):
            body = line.lstrip()[3:]
            parts = []
            while not body.rstrip().endswith('"""'):
                parts.append(body)
                body = next_line(MORE)
                if body is None:
                    break
            else:
                parts.append(body.rstrip()[:-3])
            yield "\n".join(parts).strip("\n")
            continue
        parts = []
        while line is not None and line.endswith("\\"):
            parts.append(line[:-1])
            line = next_line(MORE)
        parts.append(line or "")
        yield "\n".join(parts)


def line_reader(stdin: TextIO, interactive: bool, history: Path | None) -> Callable[[str], str | None]:
    """A function prompt -> next line (None at the end of input)."""
    if not interactive:
        def from_pipe(prompt: str) -> str | None:
            line = stdin.readline()
            return line.rstrip("\n") if line else None
        return from_pipe
    lines = terminal_lines(history)
    started = False

    def from_terminal(prompt: str) -> str | None:
        nonlocal started
        try:
            if not started:
                started = True
                return next(lines)
            return lines.send(prompt)
        except (EOFError, StopIteration):
            sys.stdout.write("\n")
            lines.close()
            return None
    return from_terminal


def repl(session: ChatSession, stdin: TextIO, stdout: TextIO, interactive: bool, stats: bool,
         history: Path | None = None) -> int:
    """Run the conversation until /bye or the end of input."""
    next_line = line_reader(stdin, interactive, history)
    for text in read_turns(next_line):
        command = text.strip()
        if command.startswith("/"):
            name, _, rest = command.partition(" ")
            if name in ("/bye", "/exit", "/quit"):
                break
            if name == "/clear":
                session.clear()
                stdout.write("(conversation cleared)\n")
            elif name == "/system":
                session.set_system(rest.strip())
                stdout.write("(system message set)\n" if rest.strip() else "(system message removed)\n")
            elif name in ("/?", "/help"):
                stdout.write(HELP + "\n")
            else:
                stdout.write(f"unknown command {name} (/? lists them)\n")
            stdout.flush()
            continue
        if not command:
            continue
        try:
            for piece in session.reply(text):
                stdout.write(piece)
                stdout.flush()
        except KeyboardInterrupt:
            stdout.write(" (stopped)")
        except LlamayError as exc:
            sys.stderr.write(f"error: {exc}\n")
            continue
        stdout.write("\n\n" if interactive else "\n")
        stdout.flush()
        if stats and session.last_stats is not None:
            sys.stderr.write("\n".join(session.last_stats.lines()) + "\n")
            sys.stderr.flush()
    return 0
