"""The model as the front process sees it: tokenizer and chat template only, no weights, no KV.

`server/app.py` tokenizes and renders prompts itself and reads a few facts off its model for
/healthz; in a cluster the compute lives in the replicas, so the front opens the GGUF (memory
mapped, metadata only) for the text side and takes the rest from the replicas.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from llamay_core.backend_api import Availability
from llamay_core.engine.model import Model


class ClusterPool:
    """KV pages summed over the replicas' last health probes (what /healthz reports)."""

    def __init__(self, latest: Callable[[], Sequence[dict[str, Any]]]) -> None:
        self._latest = latest

    @property
    def pages_in_use(self) -> int:
        return sum(s.get("kv_pages_used", 0) for s in self._latest())

    @property
    def capacity(self) -> int:
        return sum(s.get("kv_pages_total", 0) for s in self._latest())


class ClusterBackend:
    """Answers `probe()` for the whole cluster."""

    def __init__(self, device: str, gpu: bool) -> None:
        self.device = device
        self.gpu = gpu

    def probe(self) -> Availability:
        return Availability(True, device=self.device, details={"gpu": self.gpu})


class FrontModel:
    """Tokenizer, chat template and the replicas' facts, with `Model`'s own text methods."""

    tokenize = Model.tokenize
    detokenize = Model.detokenize
    _prompt_ids = Model._prompt_ids
    chat_prompt = Model.chat_prompt

    def __init__(self, model: str, described: dict[str, Any], n_replicas: int,
                 latest: Callable[[], Sequence[dict[str, Any]]]) -> None:
        from llamay_core.engine.loader import build_spec
        from llamay_core.files.gguf_file import open_gguf
        from llamay_core.files.model_names import resolve_model
        from llamay_core.tokenizer import Tokenizer

        self.gguf = open_gguf(resolve_model(model))
        self.hparams = build_spec(self.gguf).hparams
        self.tokenizer = Tokenizer.from_metadata(self.gguf.metadata)
        self.display_name = described["model_id"]
        self.backend_name = described["backend"]
        self.n_ctx = described["n_ctx"]
        self.pool = ClusterPool(latest)
        self.backend = ClusterBackend(f"{n_replicas} replicas on {described['device']}", described["gpu"])
