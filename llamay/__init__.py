"""llamay: run GGUF models locally on pluggable backends.

    import llamay
    m = llamay.load("smollm2:135m")
    print(m.generate("The capital of France is", max_tokens=16))
"""
from __future__ import annotations

import os
from typing import Any

from llamay_core.engine.context import Context
from llamay_core.engine.model import Model
from llamay_core.errors import LlamayError
from llamay_core.version import __version__

__all__ = ["load", "Model", "Context", "LlamayError", "__version__"]


def load(model: str | os.PathLike[str], backend: str | None = None, **options: Any) -> Model:
    """Load a model by path or name (e.g. "smollm2:135m"); `backend=None` picks the best trusted one.

    Options: n_ctx, kv_dtype ("f32", "f16", "vq8"), page_size, ubatch, n_seq, prefix_cache_mib.
    """
    from llamay_core.engine.loader import load_model

    return load_model(model, backend=backend, **options)
