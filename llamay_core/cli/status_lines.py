"""Where the core's log lines go when `llamay` runs: stderr, each line with the elapsed time.

Progress lines (logger "llamay.progress") and bars show only when stderr is a terminal and `-q`
is not given; warnings (logger "llamay", e.g. a skipped backend) always show.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Iterator, TextIO


class ElapsedFormatter(logging.Formatter):
    """`[  3.2s] message`: seconds since the command started, so a slow step shows its cost."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.start = start

    def format(self, record: logging.LogRecord) -> str:
        prefix = "warning: " if record.levelno >= logging.WARNING else ""
        return f"[{record.created - self.start:6.1f}s] {prefix}{record.getMessage()}"


class StatusHandler(logging.StreamHandler):
    """Writes through tqdm so a line never tears a progress bar in half; says each line once.

    Once: a one-time step reported by two layers (the loader's compile, then the first pass that
    JIT-compiles the rest) is one line to a person.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        message = record.getMessage()
        if message in self.said:
            return
        self.said.add(message)
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def status_lines(quiet: bool = False, stream: TextIO | None = None) -> Iterator[None]:
    """Route the "llamay" loggers to `stream` (default stderr) while a command runs, then undo it
    (so a command run in-process, as tests do, leaves logging as it found it)."""
    stream = stream or sys.stderr
    logger = logging.getLogger("llamay")
    saved = (logger.level, logger.propagate)
    handler = StatusHandler(stream)
    handler.setFormatter(ElapsedFormatter(time.time()))
    logger.addHandler(handler)
    logger.propagate = False
    interactive = hasattr(stream, "isatty") and stream.isatty()
    logger.setLevel(logging.INFO if interactive and not quiet else logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
