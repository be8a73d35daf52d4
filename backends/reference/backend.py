"""The reference backend object: dequantizes with gguf.quants and interprets the graph op by op."""
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
from llamay_backends.reference import ops
from llamay_core.state.host_pages import HostPageStore

# Every type gguf.quants can dequantize: the reference accepts whatever the file holds.
WEIGHT_TYPES = frozenset(t.name for t in GGMLQuantizationType
                         if t.name not in ("Q4_2", "Q4_3", "Q8_1", "Q8_K", "I8", "I16", "I32", "I64", "F64"))


class ReferenceWeights:
    """Tensors dequantized to float32 on first use and kept (the reference trades memory for clarity)."""

    def __init__(self, tensors: Mapping[str, TensorInfo]) -> None:
        self.tensors = tensors
        self._f32: dict[str, np.ndarray] = {}

    def f32(self, name: str) -> np.ndarray:
        w = self._f32.get(name)
        if w is None:
            t = self.tensors[name]
            w = dequantize(t.raw_rows(), t.ggml_type).astype(np.float32, copy=False).reshape(t.shape)
            self._f32[name] = w
        return w

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a matrix, dequantized without touching the rest (embedding lookup)."""
        if name in self._f32:
            return self._f32[name][ids]
        t = self.tensors[name]
        return dequantize(t.raw_rows()[ids], t.ggml_type).astype(np.float32).reshape(len(ids), t.shape[-1])


class ReferenceBackend(BackendBase):
    name = "reference"
    version = "1"
    capabilities = Capabilities(ops=G.OP_NAMES | G.SPLIT_OP_NAMES | G.EXTENDED_OP_NAMES, weight_types=WEIGHT_TYPES,
                                kv_dtypes={"f32", "f16", "vq8"}, max_tokens_per_pass=1 << 20,
                                device_kind="host", is_reference=True)

    def probe(self) -> Availability:
        return Availability(True, device=f"host cpu ({platform.machine()}), numpy {np.__version__}")

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> ReferenceWeights:
        return ReferenceWeights(tensors)

    def kv_store(self, spec: KvSpec) -> HostPageStore:
        return HostPageStore(spec)

    def compile(self, graph: Graph, weights: ReferenceWeights, store: HostPageStore) -> Callable[[Batch], np.ndarray]:
        return ReferenceExecutable(graph, weights, store)


class ReferenceExecutable:
    """Walks the graph for each batch. No fusion, no caching of activations: obvious on purpose."""

    def __init__(self, graph: Graph, weights: ReferenceWeights, store: HostPageStore) -> None:
        self.graph, self.weights, self.store = graph, weights, store

    def __call__(self, batch: Batch) -> np.ndarray:
        values: dict[str, np.ndarray] = {}
        for node in self.graph.nodes:
            result = self.run_node(node, values, batch)
            if result is not None:
                values[node.out] = result
        return values[self.graph.output]

    def run_node(self, node: Any, values: dict[str, np.ndarray], batch: Batch) -> np.ndarray | None:
        w = self.weights
        if isinstance(node, G.Embed):
            out = w.rows(node.weight, batch.tokens.astype(np.int64))
            return out * np.float32(node.scale) if node.scale != 1.0 else out
        if isinstance(node, G.RmsNorm):
            weight = w.f32(node.weight) if node.weight else None
            return ops.rms_norm(values[node.x], weight, node.eps, node.group, node.weight_offset)
        if isinstance(node, G.MatMul):
            bias = w.f32(node.bias) if node.bias else None
            return ops.matmul(values[node.x], w.f32(node.weight), bias)
        if isinstance(node, G.Add):
            return values[node.a] + values[node.b]
        if isinstance(node, G.Mul):
            return values[node.a] * values[node.b]
        if isinstance(node, G.Scale):
            return (values[node.x] * np.float32(node.factor)).astype(np.float32)
        if isinstance(node, G.Rope):
            return ops.rope(values[node.x], batch.positions, node.n_heads, node.head_dim, node.n_rot,
                            node.mode, node.base, node.freq_scale)
        if isinstance(node, G.RopeTable):
            return ops.rope_table(values[node.x], batch.positions, node.n_heads, node.head_dim, node.n_rot,
                                  node.mode, np.array(node.freqs), node.mscale)
        if isinstance(node, G.Columns):
            return values[node.x][:, node.start:node.start + node.width]
        if isinstance(node, G.Moe):
            return ops.moe(values[node.x], w.f32(node.router), w.f32(node.gate_exps), w.f32(node.up_exps),
                           w.f32(node.down_exps), node.n_used, node.normalize)
        if isinstance(node, G.KvWrite):
            self.kv_write(node, values, batch)
            return None
        if isinstance(node, G.Attention):
            return self.attention(node, values[node.q], batch)
        if isinstance(node, G.SiluMul):
            return ops.silu_mul(values[node.gate], values[node.up])
        if isinstance(node, G.GeluMul):
            return ops.gelu_mul(values[node.gate], values[node.up])
        if isinstance(node, G.Softcap):
            return ops.softcap(values[node.x], node.cap)
        if isinstance(node, G.SelectRows):
            return values[node.x][batch.logit_rows]
        if isinstance(node, G.Input):
            return np.asarray(batch.inputs[node.out], np.float32)
        if isinstance(node, G.Export):
            batch.outputs[node.x] = values[node.x]
            return None
        raise NotImplementedError(f"reference backend has no op {node.name!r}")

    def kv_write(self, node: G.KvWrite, values: dict[str, np.ndarray], batch: Batch) -> None:
        page_size = self.store.spec.page_size
        pages = np.array([batch.page_tables[s][p // page_size] for s, p in zip(batch.seq_index, batch.positions)],
                         dtype=np.int64)
        slots = (batch.positions % page_size).astype(np.int64)
        self.store.write(node.layer, pages, slots, values[node.k], values[node.v])

    def attention(self, node: G.Attention, q: np.ndarray, batch: Batch) -> np.ndarray:
        out = np.empty((q.shape[0], node.n_heads * node.value_dim), np.float32)
        for s in np.unique(batch.seq_index):
            rows = np.nonzero(batch.seq_index == s)[0]
            k, v = self.store.gather(node.layer, batch.page_tables[s], int(batch.kv_lens[s]))
            out[rows] = ops.attention_one_sequence(
                q[rows], batch.positions[rows], k, v, node.n_heads, node.n_kv_heads, node.key_dim,
                node.value_dim, node.scale, node.softcap, node.window)
        return out
