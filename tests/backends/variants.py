"""The example backend with one change each: one that a correct backend may make, and realistic bugs.

- `Int8Backend` (correct): each row of activations quantized to int8 in blocks of 32 (scale
  max|x|/127 per block) before each matmul with a quantized weight, as llama.cpp's CPU backend
  (q8_0) and llamay's cpu backend (`matvec_q8`) do.
- `SkipFullPageBackend`: attention reads `kv_len % page_size` slots of the last page, so a full
  last page is dropped (16 keys at 32, 48, ...; no keys at all at 16, which raises).
- `NeoxAsNormalBackend`: rope pairs (2i, 2i+1) whatever the mode, so NEOX models are wrong.
- `BatchScaleBackend`: the same int8 blocks, but each block's scale taken over the whole batch
  (the max over the wrong axis), so a row's result depends on the largest row it is batched with.
- `RaisesBackend`: attention keeps scores in a scratch buffer of 64 keys and raises past 4 pages.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from llamay_core.backend_api import Batch, KvSpec
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_example_backend import kernels
from llamay_example_backend.backend import ExampleBackend, ExampleExecutable
from llamay_example_backend.page_store import ExamplePageStore

FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})
Q8_BLOCK = 32
SCRATCH_KEYS = 64


class QuantizedNames(dict):
    """The example backend's float32 weights, plus which of them the file held quantized."""

    quantized: frozenset[str] = frozenset()


def int8_blocks(x: np.ndarray, per_batch: bool) -> np.ndarray:
    """x [rows, n] through symmetric int8 and back, one scale per 32 columns: of each row, or
    (the bug) of the whole batch. n is a multiple of 32, as every quantized weight's row is."""
    blocks = x.reshape(x.shape[0], -1, Q8_BLOCK)
    amax = np.abs(blocks).max(axis=(0, 2) if per_batch else 2, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0)
    return (np.clip(np.rint(blocks * inv), -127, 127) * d).astype(np.float32).reshape(x.shape)


class _Variant(ExampleBackend):
    version = "0.0.1"
    executable: type[ExampleExecutable] = ExampleExecutable  # each variant swaps in its own

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> QuantizedNames:
        weights = QuantizedNames(super().load_weights(tensors))
        weights.quantized = frozenset(n for n, t in tensors.items() if t.type_name not in FLOAT_TYPES)
        return weights

    def compile(self, graph: Any, weights: Any, store: Any) -> ExampleExecutable:
        return self.executable(graph, weights, store)


class _Int8Executable(ExampleExecutable):
    per_batch = False

    def _step(self, node: Any, w: Any) -> Any:
        if isinstance(node, G.MatMul) and node.weight in w.quantized:
            weight_t = np.ascontiguousarray(w[node.weight].T)
            bias = w[node.bias] if node.bias else None

            def matmul(v: dict[str, np.ndarray], b: Batch) -> None:
                y = int8_blocks(v[node.x], self.per_batch) @ weight_t
                v[node.out] = y + bias if bias is not None else y
            return matmul
        return super()._step(node, w)


class Int8Backend(_Variant):
    name = "test-int8"
    executable = _Int8Executable


class _BatchScaleExecutable(_Int8Executable):
    per_batch = True


class BatchScaleBackend(_Variant):
    name = "test-batch-scale"
    executable = _BatchScaleExecutable


class _SkipFullPageStore(ExamplePageStore):
    def gather(self, layer: int, page_table: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        size = self.spec.page_size
        n_pages = -(-length // size)
        tail = length % size  # the bug: 0 for a full last page, where it should be `size`
        rows = [(p, size) for p in page_table[:n_pages - 1]] + [(page_table[n_pages - 1], tail)]
        k = np.concatenate([self.k[layer][p, :n] for p, n in rows])
        v = np.concatenate([self.v[layer][p, :n] for p, n in rows])
        return k.astype(np.float32), v.astype(np.float32)


class SkipFullPageBackend(_Variant):
    name = "test-skip-full-page"

    def kv_store(self, spec: KvSpec) -> ExamplePageStore:
        return _SkipFullPageStore(spec)


class _NeoxAsNormalExecutable(ExampleExecutable):
    def _step(self, node: Any, w: Any) -> Any:
        if isinstance(node, G.Rope):
            return lambda v, b: v.__setitem__(node.out, kernels.rope(
                v[node.x], b.positions, node.n_heads, node.head_dim, node.n_rot, "normal", node.base, node.freq_scale))
        return super()._step(node, w)


class NeoxAsNormalBackend(_Variant):
    name = "test-neox-as-normal"
    executable = _NeoxAsNormalExecutable


class _RaisesExecutable(ExampleExecutable):
    def _attention(self, node: G.Attention, q: np.ndarray, b: Batch) -> np.ndarray:
        if int(b.kv_lens.max()) > SCRATCH_KEYS:
            raise RuntimeError(f"attention scratch holds {SCRATCH_KEYS} keys, pass needs {int(b.kv_lens.max())}")
        return super()._attention(node, q, b)


class RaisesBackend(_Variant):
    name = "test-raises"
    executable = _RaisesExecutable


# name -> (class name, passes the suite)
VARIANTS: dict[str, tuple[str, bool]] = {
    "test-int8": ("Int8Backend", True),
    "test-skip-full-page": ("SkipFullPageBackend", False),
    "test-neox-as-normal": ("NeoxAsNormalBackend", False),
    "test-batch-scale": ("BatchScaleBackend", False),
    "test-raises": ("RaisesBackend", False),
}
