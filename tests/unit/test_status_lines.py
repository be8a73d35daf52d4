"""What the command line says while it works: elapsed-time lines, once each, quiet off a terminal."""
from __future__ import annotations

import io
import logging
import re
import time

import pytest

from llamay_core.cli.status_lines import status_lines
from llamay_core.progress import progress_bar, progress_enabled, slow_step


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_progress_lines_with_elapsed_time_once_each():
    term = Terminal()
    with status_lines(stream=term):
        assert progress_enabled()
        logging.getLogger("llamay.progress").info("checking %s against reference (first use of this model)", "cpu")
        logging.getLogger("llamay.progress").info("compiling kernels (one time)")
        logging.getLogger("llamay.progress").info("compiling kernels (one time)")
        logging.getLogger("llamay").warning("skipping cuda: no device")
    assert not progress_enabled() and logging.getLogger("llamay").propagate  # left as it was found
    lines = term.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert re.fullmatch(r"\[\s+\d+\.\ds\] checking cpu against reference \(first use of this model\)", lines[0])
    assert lines[1].endswith("] compiling kernels (one time)")
    assert lines[2].endswith("] warning: skipping cuda: no device")


@pytest.mark.parametrize("stream, quiet", [(io.StringIO(), False), (Terminal(), True)])
def test_off_a_terminal_or_with_q_only_warnings_show(stream, quiet):
    with status_lines(quiet=quiet, stream=stream):
        assert not progress_enabled()
        logging.getLogger("llamay.progress").info("compiling kernels (one time)")
        with progress_bar(10, "bench") as bar:
            bar.update(10)
        logging.getLogger("llamay").warning("skipping cuda")
    assert stream.getvalue().splitlines() == [stream.getvalue().splitlines()[0]]
    assert stream.getvalue().rstrip().endswith("warning: skipping cuda")


def test_slow_steps_speak_only_when_slow():
    term = Terminal()
    with status_lines(stream=term):
        with slow_step("compiling kernels (one time)", after=0.2):
            pass
        time.sleep(0.3)
        assert term.getvalue() == ""  # a warm run says nothing
        with slow_step("compiling kernels (one time)", after=0.05):
            time.sleep(0.4)
    assert "compiling kernels (one time)" in term.getvalue()


def test_warm_up_runs_on_every_backend_but_the_reference(tiny_model_path, monkeypatch):
    import attrs

    import llamay
    from llamay_core.cli.warm_up import warm_up

    m = llamay.load(tiny_model_path, backend="reference", n_ctx=64, n_seq=1)
    passes = []
    run = m.forward.run
    m.forward.run = lambda seq, ids, **kw: passes.append(len(ids)) or run(seq, ids, **kw)
    warm_up(m)
    assert passes == []
    monkeypatch.setattr(m.backend, "capabilities", attrs.evolve(m.backend.capabilities, is_reference=False))
    warm_up(m)
    assert passes == [32, 2, 1] and m.pool.pages_in_use == 0


def test_a_first_pass_compile_is_not_counted_in_stats(tiny_model_path, monkeypatch, capsys):
    """A backend that JIT-compiles on its first pass (as Numba does): -stats must not time it."""
    import re

    import attrs

    import llamay
    from llamay_core.cli.main import main

    real_load = llamay.load

    def load_with_jit(*args, **kwargs):
        m = real_load(*args, **kwargs)
        monkeypatch.setattr(m.backend, "capabilities", attrs.evolve(m.backend.capabilities, is_reference=False))
        run, compiled = m.forward.run, []

        def first_pass_compiles(seq, ids, **kw):
            if not compiled:
                time.sleep(1.0)
                compiled.append(True)
            return run(seq, ids, **kw)
        m.forward.run = first_pass_compiles
        return m

    monkeypatch.setattr(llamay, "load", load_with_jit)
    assert main(["run", "-m", str(tiny_model_path), "-backend", "reference", "-p", "the cat", "-n", "2", "-stats"]) == 0
    stats = capsys.readouterr().err
    prompt_s = float(re.search(r"prompt \d+ tokens in ([0-9.]+)s", stats).group(1))
    assert prompt_s < 0.5, stats
