"""`llamay serve` as a child process, for the tests that need its real signals and exit status."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serve_process(args: list[str], port: int, *, ready_path: str = "/health",
                  timeout_s: float = 60.0) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`llamay serve ARGS -port PORT` started and answering `ready_path`; yields (process, base URL).

    The process is killed on the way out if the test has not ended it; its stderr is a pipe, so a
    server that exits during start-up fails the test with what it printed.
    """
    proc = subprocess.Popen([sys.executable, "-m", "llamay_core.cli.main", "serve", *args, "-port", str(port)],
                            cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, proc.stderr.read()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + ready_path, timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
