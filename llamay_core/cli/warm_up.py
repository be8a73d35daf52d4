"""One short pass before anything is timed: backends that compile kernels on first use (Numba
JIT, shader pipelines) pay that here, under a "compiling kernels" line, not in `-stats` rates."""
from __future__ import annotations

from typing import Any

from llamay_core.progress import slow_step


def warm_up(model: Any) -> None:
    """Run a two-token pass (the prefill path) and a one-token pass (the decode path), then forget them.

    Only for backends that compile (they report `compile_seconds`); `reference` compiles nothing.
    """
    if not hasattr(model.backend, "compile_seconds"):
        return
    bos = model.tokenizer.bos_id
    token = bos if bos is not None and bos >= 0 else 0
    ctx = model.context()
    try:
        with slow_step("compiling kernels (one time)"):
            ctx.extend([token, token])
            ctx.extend([token])
    finally:
        ctx.close()
