"""Telling people what is happening: status lines through `logging`, bars through tqdm.

The core only logs and makes bars; the command line decides where they go
(`llamay_core/cli/status_lines.py`). Bars and progress lines show when the "llamay.progress"
logger is enabled for INFO, which the CLI arranges when stderr is a terminal and `-q` is not
given; a library user sees neither unless they enable that logger.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import threading
from typing import Any, Iterator

PROGRESS = logging.getLogger("llamay.progress")


def progress_enabled() -> bool:
    return PROGRESS.isEnabledFor(logging.INFO)


def progress_bar(total: int | None, desc: str, unit: str = "it", byte_sizes: bool = False,
                 leave: bool = False) -> Any:
    """A tqdm bar on stderr (a no-op bar when progress is off). byte_sizes: show KiB/MiB and a rate."""
    from tqdm import tqdm

    # tqdm hides its bar on a terminal that reports no size (some pseudo-terminals): assume 100x24
    size = shutil.get_terminal_size((100, 24))
    return tqdm(total=total, desc=desc, unit="B" if byte_sizes else unit, unit_scale=byte_sizes,
                unit_divisor=1024 if byte_sizes else 1000, file=sys.stderr, leave=leave,
                disable=not progress_enabled(), ncols=size.columns or 100, nrows=size.lines or 24)


@contextlib.contextmanager
def slow_step(message: str, after: float = 1.0) -> Iterator[None]:
    """Log `message` on the progress logger if the step is still running after `after` seconds.

    One-time costs (kernel compiles) say so only when they are actually paid: warm runs, whose
    caches make the step fast, print nothing.
    """
    timer = threading.Timer(after, PROGRESS.info, args=(message,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
