"""One short pass before anything is timed: backends that compile kernels on first use (Numba
JIT, shader pipelines) pay that here, under a "compiling kernels" line, not in `-stats` rates."""
from __future__ import annotations

from typing import Any

from llamay_core.progress import slow_step


# Pass widths that reach each kind of kernel a backend may specialise: a wide prefill tile, a
# narrow one, and single-token decode.
WARM_PASSES = (32, 2, 1)


def warm_up(model: Any) -> None:
    """Run one pass of each width in WARM_PASSES on a scratch context, then forget it.

    The reference compiles nothing and is skipped; any other backend may compile on first use.
    """
    if model.backend.capabilities.is_reference:
        return
    bos = model.tokenizer.bos_id
    token = bos if bos is not None and bos >= 0 else 0
    ctx = model.context()
    try:
        with slow_step("compiling kernels (one time)"):
            for width in WARM_PASSES:
                width = min(width, model.n_ctx - len(ctx.tokens))
                if width > 0:
                    ctx.extend([token] * width)
    finally:
        ctx.close()
