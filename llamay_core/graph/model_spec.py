"""What a model family hands the engine: hyperparameters, the graph, the tensors it reads."""
from __future__ import annotations

from typing import Mapping

import attrs

from llamay_core.graph.graph import Graph


@attrs.frozen
class Hyperparameters:
    """The numbers that shape a model, read from GGUF metadata by its family."""

    architecture: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_heads: int
    n_kv_heads: int
    key_dim: int
    value_dim: int
    n_vocab: int
    context_length: int
    rope_base: float = 10000.0
    rope_mode: str = "normal"
    norm_eps: float = 1e-5
    tied_embeddings: bool = False


@attrs.frozen
class ModelSpec:
    """A family's answer for one GGUF file."""

    hparams: Hyperparameters
    graph: Graph
    tensor_shapes: Mapping[str, tuple[int, ...]]  # numpy order (rows, cols)
