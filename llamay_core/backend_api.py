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

Optional members (``set_threads``, ``describe``, ``bench_lines``, ``compile_seconds``,
``close``) have defaults in ``BackendBase``, which backends subclass.

See docs/backend-authors.md for a walk-through.
"""
from __future__ import annotations

import types
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


DEVICE_KINDS = ("host", "gpu")


@attrs.frozen
class Capabilities:
    """What a backend declares it can do. The engine checks this before handing it a graph.

    ``device_kind``: "host" when the backend computes in host memory on the CPU (it can then be
    the fallback for ops another backend lacks, see engine/split.py), "gpu" for an accelerator
    (reports and the server's metrics label it so). ``is_reference``: the backend defines
    correctness; only the reference sets it (auto-selection trusts it without a record).
    """

    ops: frozenset[str] = attrs.field(converter=frozenset)
    weight_types: frozenset[str] = attrs.field(converter=frozenset)  # GGML type names, e.g. "Q4_K"
    kv_dtypes: frozenset[str] = attrs.field(converter=frozenset, default=frozenset({"f32"}))
    max_tokens_per_pass: int = 4096
    device_kind: str = attrs.field(default="gpu", validator=attrs.validators.in_(DEVICE_KINDS))
    is_reference: bool = False


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
    """Device storage for KV pages. Page ids are allocated by the engine's page pool.

    ``spec`` is the KvSpec the store was made for (the engine reads page size and count from
    it). ``encoding`` names the byte layout of ``read_page``: snapshots record it, and a
    snapshot restores only into a store with the same encoding. Stores that use the standard
    layout (``llamay_core.state.host_pages.standard_encoding``) share snapshots across backends.
    """

    spec: KvSpec
    encoding: str

    def read_page(self, page: int) -> bytes:
        """The page's bytes (every layer's K and V), in this store's dtype encoding."""

    def write_page(self, page: int, data: bytes) -> None:
        """Overwrite a page with bytes from ``read_page`` of a store with the same spec."""

    def copy_page(self, src: int, dst: int) -> None:
        """Copy one page to another (copy-on-write after a fork)."""


class Executable(Protocol):
    def __call__(self, batch: Batch) -> np.ndarray:
        """Run the graph on a batch; return float32 logits [len(batch.logit_rows), n_vocab]."""


class BackendBase:
    """The optional members of a backend, with their defaults: subclass it, override what applies.

    The engine calls these directly (never "if it has one"). A backend written without this class
    (an older plugin) is given these defaults for the members it lacks when it is loaded
    (`adopt_defaults`); only the required members are refused when missing.
    """

    # Seconds spent building kernels (shader/JIT compilation) so far, for bench's load line.
    compile_seconds: float = 0.0

    def set_threads(self, n: int) -> None:
        """Use `n` host threads from now on (`llamay bench -t`). Default: ignored."""

    def describe(self) -> dict[str, str]:
        """Extra lines for reports, e.g. {"kernels": "avx2", "matmul": "tiled"}. Default: none."""
        return {}

    def bench_lines(self) -> list[str]:
        """Sentences `llamay bench` prints under its table (device limits, fallbacks). Default: none."""
        return []

    def close(self) -> None:
        """Release device memory and handles; called once when the model using this backend is
        released (`Model.close()`), or when auto-selection rejects the backend. Default: nothing."""


class Backend(Protocol):
    """A backend object: the required members below plus the optional ones of `BackendBase`."""

    name: str
    version: str
    capabilities: Capabilities
    compile_seconds: float

    def probe(self) -> Availability: ...

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> Any: ...

    def kv_store(self, spec: KvSpec) -> PageStore: ...

    def compile(self, graph: Graph, weights: Any, store: PageStore) -> Executable: ...

    def set_threads(self, n: int) -> None: ...

    def describe(self) -> dict[str, str]: ...

    def bench_lines(self) -> list[str]: ...

    def close(self) -> None: ...


def dequantize(tensor: TensorInfo, rows: np.ndarray | None = None) -> np.ndarray:
    """A weight as float32 [rows, cols] (all rows, or those numbered `rows`), decoded from its GGML
    blocks by `gguf.quants.dequantize`, the definition the conformance suite checks against.

    For tests and bring-up: a fast backend decodes blocks in its kernels. Q4_0 is d * (q - 8);
    Q4_1 is d * q + m (q in 0..15, per block of 32, d and m f16); the K-quants follow ggml's layout.
    """
    from gguf.quants import dequantize as decode

    raw = tensor.raw_rows() if rows is None else tensor.raw_rows()[np.asarray(rows)]
    return decode(raw, tensor.ggml_type).astype(np.float32, copy=False).reshape(raw.shape[0], tensor.shape[-1])


REQUIRED_MEMBERS = ("name", "version", "capabilities", "probe", "load_weights", "kv_store", "compile")
OPTIONAL_MEMBERS = ("compile_seconds", "set_threads", "describe", "bench_lines", "close")


def missing_members(backend: Any) -> list[str]:
    """Members of the contract `backend` lacks (optional ones come with `BackendBase`)."""
    return [m for m in REQUIRED_MEMBERS + OPTIONAL_MEMBERS if not hasattr(backend, m)]


def adopt_defaults(backend: Any) -> list[str]:
    """Give `backend` `BackendBase`'s default for each optional member it lacks; returns those.

    Backends written before the optional members existed keep working; required members cannot
    be defaulted and stay missing.
    """
    adopted = []
    for member in OPTIONAL_MEMBERS:
        if hasattr(backend, member):
            continue
        default = getattr(BackendBase, member)
        try:
            setattr(backend, member, types.MethodType(default, backend) if callable(default) else default)
        except (AttributeError, TypeError):  # __slots__ or a frozen object: leave it missing
            continue
        adopted.append(member)
    return adopted
