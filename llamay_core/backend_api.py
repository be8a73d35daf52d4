"""The backend contract (version 1): what a backend object provides and what it is handed.

A backend is created lazily from its registered factory and then used directly, never through
pluggy. The engine owns page tables and reference counts; a backend owns the page bytes. The
contract is deliberately small:

- ``probe() -> Availability``: is it usable here, and on what device.
- ``capabilities``: the ops it implements, the GGML weight types and KV dtypes it accepts.
- ``load_weights(tensors) -> weights``: once per model; keep GGML block formats or repack.
- ``kv_store(spec) -> PageStore``: page storage for the KV cache on the device.
- ``compile(graph, weights, store) -> Executable``: once per model; ``executable(batch)`` runs
  one forward pass and returns the logits of the rows the batch asks for.

See docs/backend-authors.md for a walk-through.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

import attrs
import numpy as np

from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph.graph import Graph

KV_DTYPES = ("f32", "f16", "vq8")


@attrs.frozen
class Availability:
    """Whether a backend can run here; when not, ``reason`` says why in one line."""

    available: bool
    reason: str = ""
    device: str = ""
    details: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Capabilities:
    """What a backend declares it can do. The engine checks this before handing it a graph."""

    ops: frozenset[str] = attrs.field(converter=frozenset)
    weight_types: frozenset[str] = attrs.field(converter=frozenset)  # GGML type names, e.g. "Q4_K"
    kv_dtypes: frozenset[str] = attrs.field(converter=frozenset, default=frozenset({"f32"}))
    max_tokens_per_pass: int = 4096


@attrs.frozen
class KvSpec:
    """Shape of the KV cache: pages of ``page_size`` tokens holding every layer's K and V."""

    n_layers: int
    n_kv_heads: int
    key_dim: int
    value_dim: int
    page_size: int = 16
    max_pages: int = 1024
    dtype: str = "f32"

    @property
    def token_elements(self) -> int:
        return self.n_layers * self.n_kv_heads * (self.key_dim + self.value_dim)

    def bytes_per_token(self) -> float:
        """Bytes one cached token costs at this dtype (vq8: int8 + one f16 scale per 32)."""
        per = {"f32": 4.0, "f16": 2.0, "vq8": 1.0 + 2.0 / 32.0}[self.dtype]
        return self.token_elements * per

    def page_bytes(self) -> int:
        return int(round(self.bytes_per_token() * self.page_size))


@attrs.define
class Batch:
    """One forward pass: tokens of one or more sequences, with their places in the KV cache.

    Token ``t`` belongs to sequence ``seq_index[t]`` and sits at ``positions[t]``; its K/V go to
    page ``page_tables[s][p // page_size]`` at slot ``p % page_size``. ``kv_lens[s]`` is the
    sequence's length after this pass. ``logit_rows`` are the token rows whose logits are
    returned, in order. ``inputs``/``outputs`` carry activations across a graph split (the
    ``input`` and ``export`` ops); they are empty for a graph that runs on one backend.
    """

    tokens: np.ndarray  # int32 [T]
    positions: np.ndarray  # int32 [T]
    seq_index: np.ndarray  # int32 [T]
    page_tables: list[np.ndarray]  # per sequence, int32 page ids
    kv_lens: np.ndarray  # int32 [S]
    logit_rows: np.ndarray  # int32 [R]
    # Graph splits only: values for `input` ops, and where `export` ops put theirs.
    inputs: dict[str, np.ndarray] = attrs.Factory(dict)
    outputs: dict[str, np.ndarray] = attrs.Factory(dict)

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])


@runtime_checkable
class PageStore(Protocol):
    """Device storage for KV pages. Page ids are allocated by the engine's page pool."""

    spec: KvSpec

    def read_page(self, page: int) -> bytes:
        """The page's bytes (every layer's K and V), in this store's dtype encoding."""

    def write_page(self, page: int, data: bytes) -> None:
        """Overwrite a page with bytes from ``read_page`` of a store with the same spec."""

    def copy_page(self, src: int, dst: int) -> None:
        """Copy one page to another (copy-on-write after a fork)."""


class Executable(Protocol):
    def __call__(self, batch: Batch) -> np.ndarray:
        """Run the graph on a batch; return float32 logits [len(batch.logit_rows), n_vocab]."""


class Backend(Protocol):
    name: str
    version: str
    capabilities: Capabilities

    def probe(self) -> Availability: ...

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> Any: ...

    def kv_store(self, spec: KvSpec) -> PageStore: ...

    def compile(self, graph: Graph, weights: Any, store: PageStore) -> Executable: ...
