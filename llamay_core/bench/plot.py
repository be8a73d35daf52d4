"""`llamay bench -sweep ... -plot FILE.png`: rate against tile width or prompt length.

matplotlib is an optional extra (`pip install 'llamay[plot]'`); it is drawn through a bare
Figure and the Agg canvas, so no display and no pyplot global state are involved.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from llamay_core.bench.measure import Sample
from llamay_core.errors import UsageError

AXES = {"ubatch": "tile width (tokens per pass)", "prompt": "prompt length (tokens)"}


def plot_sweep(samples: list[Sample], cond: dict[str, Any], path: str | Path) -> Path:
    """Draw every sweep sample (best rate as a line, each repetition as a dot) into a PNG."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("-plot needs matplotlib: pip install 'llamay[plot]'") from None
    sweep = [s for s in samples if s.phase == "sweep"]
    if not sweep:
        raise UsageError("-plot draws a sweep: add -sweep (tile widths) or -sweep prompt (prompt lengths)")
    key = next(k for k in AXES if k in sweep[0].extra)
    xs = [s.extra[key] for s in sweep]
    fig = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(xs, [s.rate for s in sweep], marker="o", label=f"best of {len(sweep[0].seconds)}")
    for x, s in zip(xs, sweep):
        ax.scatter([x] * len(s.seconds), [s.tokens / t for t in s.seconds], color="tab:blue", alpha=0.3, s=12)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(AXES[key])
    ax.set_ylabel("prefill rate (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(f"{cond['model_name']} · {cond['backend']} · {cond['threads']} threads · kv {cond['kv_dtype']} · "
                 f"llamay {cond['llamay_version']}", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    try:
        fig.savefig(out, format="png")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    return out
