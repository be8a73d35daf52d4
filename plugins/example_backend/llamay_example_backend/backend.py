"""The example backend: the whole llamay backend contract (version 1) in one small class.

- `probe` says whether the backend can run here.
- `capabilities` declares the ops, GGML weight types and KV dtypes; the engine runs any op you
  leave out on a fallback backend (it then needs the `input` and `export` ops declared here).
- `load_weights` is called once per model: the place to upload or repack. Here: dequantize
  every tensor to float32 with gguf.quants (a real backend keeps the GGML blocks on the device).
- `kv_store` returns the KV page storage; `compile` returns a callable run once per pass.
"""
from __future__ import annotations

import platform
from typing import Any, Callable, Mapping

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from llamay_core.backend_api import Availability, BackendBase, Batch, Capabilities, KvSpec
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_example_backend import kernels
from llamay_example_backend.page_store import ExamplePageStore

# The GGML types gguf.quants decodes and real models use.
WEIGHT_TYPES = frozenset({"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                          "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"})

Step = Callable[[dict[str, np.ndarray], Batch], None]


class ExampleBackend(BackendBase):
    name = "example"
    version = "0.1.0"  # conformance records are kept per version: bump it when kernels change
    capabilities = Capabilities(ops=G.OP_NAMES | G.SPLIT_OP_NAMES, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32", "f16"}, max_tokens_per_pass=4096, device_kind="host")

    def probe(self) -> Availability:
        return Availability(True, device=f"host {platform.machine()} (numpy {np.__version__})")

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> dict[str, np.ndarray]:
        weights = {}
        for name, t in tensors.items():
            if t.type_name not in WEIGHT_TYPES:
                raise ValueError(f"{name}: the example backend does not read {t.type_name}")
            values = dequantize(t.raw_rows(), GGMLQuantizationType[t.type_name])
            weights[name] = np.ascontiguousarray(values, np.float32).reshape(t.shape)
        return weights

    def kv_store(self, spec: KvSpec) -> ExamplePageStore:
        return ExamplePageStore(spec)

    def compile(self, graph: Graph, weights: dict[str, np.ndarray], store: ExamplePageStore) -> "ExampleExecutable":
        return ExampleExecutable(graph, weights, store)


class ExampleExecutable:
    """The graph turned once into a list of steps; a pass runs them in order."""

    def __init__(self, graph: Graph, weights: dict[str, np.ndarray], store: ExamplePageStore) -> None:
        self.output = graph.output
        self.store = store
        self.steps = [self._step(node, weights) for node in graph.nodes]

    def __call__(self, batch: Batch) -> np.ndarray:
        values: dict[str, np.ndarray] = {}
        for step in self.steps:
            step(values, batch)
        return values[self.output]

    def _step(self, node: Any, w: dict[str, np.ndarray]) -> Step:
        """One closure per node, with its weights and parameters looked up now, not per pass."""
        if isinstance(node, G.Embed):
            table, scale = w[node.weight], np.float32(node.scale)

            def embed(v, b):
                rows = table[b.tokens]
                v[node.out] = rows * scale if node.scale != 1.0 else rows
            return embed
        if isinstance(node, G.RmsNorm):
            weight = w[node.weight] if node.weight else None
            return lambda v, b: v.__setitem__(node.out, kernels.rms_norm(
                v[node.x], weight, node.eps, node.group, node.weight_offset))
        if isinstance(node, G.MatMul):
            weight_t = np.ascontiguousarray(w[node.weight].T)
            bias = w[node.bias] if node.bias else None

            def matmul(v, b):
                y = v[node.x] @ weight_t
                v[node.out] = y + bias if bias is not None else y
            return matmul
        if isinstance(node, (G.Add, G.Mul)):
            fn = np.add if isinstance(node, G.Add) else np.multiply
            return lambda v, b: v.__setitem__(node.out, fn(v[node.a], v[node.b]))
        if isinstance(node, G.Scale):
            factor = np.float32(node.factor)
            return lambda v, b: v.__setitem__(node.out, v[node.x] * factor)
        if isinstance(node, G.Rope):
            return lambda v, b: v.__setitem__(node.out, kernels.rope(
                v[node.x], b.positions, node.n_heads, node.head_dim, node.n_rot, node.mode, node.base, node.freq_scale))
        if isinstance(node, G.KvWrite):
            return lambda v, b: self._kv_write(node, v, b)
        if isinstance(node, G.Attention):
            return lambda v, b: v.__setitem__(node.out, self._attention(node, v[node.q], b))
        if isinstance(node, G.SiluMul):
            return lambda v, b: v.__setitem__(node.out, kernels.silu_mul(v[node.gate], v[node.up]))
        if isinstance(node, G.GeluMul):
            return lambda v, b: v.__setitem__(node.out, kernels.gelu_mul(v[node.gate], v[node.up]))
        if isinstance(node, G.Softcap):
            return lambda v, b: v.__setitem__(node.out, kernels.softcap(v[node.x], node.cap))
        if isinstance(node, G.SelectRows):
            return lambda v, b: v.__setitem__(node.out, v[node.x][b.logit_rows])
        if isinstance(node, G.Input):  # graph split: a value computed by another backend
            return lambda v, b: v.__setitem__(node.out, np.asarray(b.inputs[node.out], np.float32))
        if isinstance(node, G.Export):  # graph split: a value another backend needs next
            return lambda v, b: b.outputs.__setitem__(node.x, v[node.x])
        raise NotImplementedError(f"example backend has no op {node.name!r}")

    def _kv_write(self, node: G.KvWrite, v: dict[str, np.ndarray], b: Batch) -> None:
        size = self.store.spec.page_size
        pages = np.array([b.page_tables[s][p // size] for s, p in zip(b.seq_index, b.positions)], np.int64)
        self.store.write(node.layer, pages, b.positions % size, v[node.k], v[node.v])

    def _attention(self, node: G.Attention, q: np.ndarray, b: Batch) -> np.ndarray:
        out = np.empty((q.shape[0], node.n_heads * node.value_dim), np.float32)
        for s in np.unique(b.seq_index):
            rows = np.nonzero(b.seq_index == s)[0]
            k, v = self.store.gather(node.layer, b.page_tables[s], int(b.kv_lens[s]))
            out[rows] = kernels.attention(q[rows], b.positions[rows], k, v, node.n_heads, node.n_kv_heads,
                                          node.key_dim, node.value_dim, node.scale, node.softcap, node.window)
        return out
