"""The Metal backend object, written against PyObjC's Metal API (`import Metal`).

Not run-verified: this project has no Mac, so this code has only been read, never executed past
`probe()`. It is kept small and plain so whoever first runs it on Apple silicon can check it
against `llamay conformance -backend metal`. Buffers use shared storage: Apple GPUs have unified
memory, so weights are copied once and KV pages are NumPy views of the page buffer.
"""
from __future__ import annotations

import struct
from typing import Any, Mapping

import numpy as np

from llamay_core.backend_api import Availability, BackendBase, Batch, Capabilities, KvSpec
from llamay_core.state.host_pages import standard_encoding
from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.metal.kernel_sources import FORMATS, library_source
from llamay_backends.metal.probe import probe_metal

MAX_TOKENS_PER_PASS = 512
MATVEC_MAX_ROWS = 8


class MetalBackend(BackendBase):
    name = "metal"
    version = "0"
    capabilities = Capabilities(ops=frozenset(G.OP_NAMES), weight_types=frozenset(FORMATS), kv_dtypes={"f32"},
                                max_tokens_per_pass=MAX_TOKENS_PER_PASS)

    def __init__(self) -> None:
        self._device = None
        self._pipelines: dict[str, Any] = {}
        self._library = None

    def probe(self) -> Availability:
        return probe_metal()

    @property
    def device(self) -> Any:
        if self._device is None:
            availability = self.probe()
            if not availability.available:
                raise BackendError(f"backend 'metal' is unavailable: {availability.reason}")
            import Metal

            self._device = Metal.MTLCreateSystemDefaultDevice()
            self.queue = self._device.newCommandQueue()
        return self._device

    def buffer(self, data: bytes | int) -> Any:
        import Metal

        if isinstance(data, int):
            return self.device.newBufferWithLength_options_(max(data, 4), Metal.MTLResourceStorageModeShared)
        return self.device.newBufferWithBytes_length_options_(data, len(data), Metal.MTLResourceStorageModeShared)

    def pipeline(self, kernel: str) -> Any:
        p = self._pipelines.get(kernel)
        if p is None:
            if self._library is None:
                self._library, error = self.device.newLibraryWithSource_options_error_(library_source(), None, None)
                if self._library is None:
                    raise BackendError(f"metal: kernel library failed to compile: {error}")
            fn = self._library.newFunctionWithName_(kernel)
            p, error = self.device.newComputePipelineStateWithFunction_error_(fn, None)
            if p is None:
                raise BackendError(f"metal: pipeline {kernel}: {error}")
            self._pipelines[kernel] = p
        return p

    def load_weights(self, tensors: Mapping[str, TensorInfo]) -> dict[str, tuple[Any, str, tuple[int, ...], int]]:
        from gguf.quants import dequantize

        out = {}
        for name, t in tensors.items():
            if len(t.shape) == 1:  # vectors as float32: what the kernels read
                host = dequantize(t.raw_rows(), t.ggml_type).astype(np.float32).reshape(-1)
                out[name] = (self.buffer(host.tobytes()), "F32", tuple(t.shape), 0)
            else:
                raw = np.ascontiguousarray(t.raw_rows())
                out[name] = (self.buffer(raw.tobytes()), t.type_name, tuple(t.shape), raw.shape[1])
        return out

    def kv_store(self, spec: KvSpec) -> "MetalPageStore":
        if spec.dtype != "f32":
            raise BackendError("metal: KV pages are f32 only")
        return MetalPageStore(spec, self)

    def compile(self, graph: Graph, weights: dict, store: "MetalPageStore") -> "MetalExecutable":
        return MetalExecutable(self, graph, weights, store)


class MetalPageStore:
    """One shared buffer of [max_pages, page_elems] float32, in the CUDA/reference page order."""

    def __init__(self, spec: KvSpec, backend: MetalBackend) -> None:
        self.spec = spec
        self.encoding = standard_encoding(spec)
        kw, vw = spec.n_kv_heads * spec.key_dim, spec.n_kv_heads * spec.value_dim
        self.page_elems = spec.n_layers * spec.page_size * (kw + vw)
        self.buffer = backend.buffer(spec.max_pages * self.page_elems * 4)
        view = self.buffer.contents().as_buffer(self.buffer.length())
        self.pages = np.frombuffer(view, np.float32).reshape(spec.max_pages, self.page_elems)

    def read_page(self, page: int) -> bytes:
        return self.pages[page].tobytes()

    def write_page(self, page: int, data: bytes) -> None:
        self.pages[page] = np.frombuffer(data, np.float32)

    def copy_page(self, src: int, dst: int) -> None:
        self.pages[dst] = self.pages[src]


class MetalExecutable:
    """Encodes a pass into one command buffer: one compute encoder, one dispatch per op."""

    def __init__(self, backend: MetalBackend, graph: Graph, weights: dict, store: MetalPageStore) -> None:
        self.b, self.graph, self.weights, self.store = backend, graph, weights, store
        self.widths: dict[str, int] = {}
        for n in graph.nodes:
            if isinstance(n, G.KvWrite):
                continue
            if isinstance(n, G.Embed):
                w = weights[n.weight][2][1]
            elif isinstance(n, G.MatMul):
                w = weights[n.weight][2][0]
            elif isinstance(n, G.Attention):
                w = n.n_heads * n.value_dim
            else:
                w = self.widths[n.inputs()[0]]
            self.widths[n.out] = w
        self.values = {name: backend.buffer(MAX_TOKENS_PER_PASS * w * 4) for name, w in self.widths.items()}

    def __call__(self, batch: Batch) -> np.ndarray:
        s = self.store.spec
        stride = s.max_pages
        tables = np.zeros((len(batch.page_tables), stride), np.int32)
        for i, t in enumerate(batch.page_tables):
            tables[i, :len(t)] = t
        ints = {k: self.b.buffer(np.ascontiguousarray(v, np.int32).tobytes()) for k, v in (
            ("tokens", batch.tokens), ("positions", batch.positions), ("seq_index", batch.seq_index),
            ("kv_lens", batch.kv_lens), ("logit_rows", batch.logit_rows), ("page_tables", tables))}
        cmd = self.b.queue.commandBuffer()
        enc = cmd.computeCommandEncoder()
        t_count, r_count = batch.n_tokens, len(batch.logit_rows)
        rows_of: dict[str, int] = {}
        for n in self.graph.nodes:
            self.encode(enc, n, ints, t_count, r_count, rows_of)
        enc.endEncoding()
        cmd.commit()
        cmd.waitUntilCompleted()
        out = self.values[self.graph.output]
        view = out.contents().as_buffer(r_count * self.graph.n_vocab * 4)
        return np.frombuffer(view, np.float32).reshape(r_count, self.graph.n_vocab).copy()

    def encode(self, enc: Any, n: Any, ints: dict, t_count: int, r_count: int, rows_of: dict[str, int]) -> None:
        import Metal

        def bufs(*items: Any) -> None:
            for i, item in enumerate(items):
                if isinstance(item, bytes):
                    enc.setBytes_length_atIndex_(item, len(item), i)
                else:
                    enc.setBuffer_offset_atIndex_(item, 0, i)

        def dispatch(kernel: str, groups: tuple[int, int], threads: tuple[int, int]) -> None:
            enc.setComputePipelineState_(self.b.pipeline(kernel))
            enc.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(groups[0], groups[1], 1),
                                                            Metal.MTLSizeMake(threads[0], threads[1], 1))

        rows = r_count if rows_of.get(next(iter(n.inputs()), None)) == r_count \
            and not isinstance(n, (G.Embed, G.KvWrite, G.Attention)) else t_count
        if isinstance(n, G.SelectRows):
            rows = r_count
        for out_name in n.outputs():
            rows_of[out_name] = rows
        s = self.store.spec
        kw, vw = s.n_kv_heads * s.key_dim, s.n_kv_heads * s.value_dim
        page_params = lambda layer: struct.pack("<6i", s.max_pages, layer, kw, vw, s.page_size, s.n_layers)
        if isinstance(n, G.Embed):
            buf, typ, shape, row_bytes = self.weights[n.weight]
            bufs(buf, ints["tokens"], self.values[n.out], struct.pack("<qif4x", row_bytes, shape[1], n.scale))
            dispatch(f"embed_{FORMATS[typ]}", (rows, 1), (128, 1))
        elif isinstance(n, G.RmsNorm):
            width = self.widths[n.out]
            group = n.group or width
            weight = self.weights[n.weight][0] if n.weight else self.values[n.x]
            bufs(self.values[n.x], weight, self.values[n.out],
                 struct.pack("<iiffi", width, group, n.eps, n.weight_offset, int(bool(n.weight))))
            dispatch("rms_norm", (width // group, rows), (256, 1))
        elif isinstance(n, G.MatMul):
            buf, typ, shape, row_bytes = self.weights[n.weight]
            bias = self.weights[n.bias][0] if n.bias else self.values[n.x]
            bufs(buf, self.values[n.x], bias, self.values[n.out],
                 struct.pack("<qiiii", row_bytes, shape[1], shape[0], rows, int(bool(n.bias))))
            if rows <= MATVEC_MAX_ROWS or shape[1] % 32:
                dispatch(f"matvec_{FORMATS[typ]}", (-(-shape[0] // 4), rows), (32, 4))
            else:
                dispatch(f"matmul_tiled_{FORMATS[typ]}", (-(-shape[0] // 32), -(-rows // 32)), (32, 8))
        elif isinstance(n, (G.Add, G.Mul, G.SiluMul, G.GeluMul)):
            a, b = (n.a, n.b) if isinstance(n, (G.Add, G.Mul)) else (n.gate, n.up)
            count = rows * self.widths[n.out]
            bufs(self.values[a], self.values[b], self.values[n.out], struct.pack("<q", count))
            dispatch(n.name, (-(-count // 256), 1), (256, 1))
        elif isinstance(n, (G.Scale, G.Softcap)):
            count = rows * self.widths[n.out]
            factor = n.factor if isinstance(n, G.Scale) else n.cap
            bufs(self.values[n.x], self.values[n.out], struct.pack("<q", count), struct.pack("<f", factor))
            dispatch(n.name, (-(-count // 256), 1), (256, 1))
        elif isinstance(n, G.Rope):
            count = rows * n.n_heads * n.head_dim
            bufs(self.values[n.x], self.values[n.out], ints["positions"],
                 struct.pack("<5iff", rows, n.n_heads, n.head_dim, n.n_rot, int(n.mode == "neox"), n.base, n.freq_scale))
            dispatch("rope", (-(-count // 256), 1), (256, 1))
        elif isinstance(n, G.KvWrite):
            bufs(self.values[n.k], self.values[n.v], self.store.buffer, ints["positions"], ints["seq_index"],
                 ints["page_tables"], page_params(n.layer))
            dispatch("kv_write", (t_count, 1), (256, 1))
        elif isinstance(n, G.Attention):
            bufs(self.values[n.q], self.store.buffer, ints["positions"], ints["seq_index"], ints["page_tables"],
                 ints["kv_lens"], self.values[n.out], page_params(n.layer),
                 struct.pack("<4iffi", n.n_heads, n.n_kv_heads, n.key_dim, n.value_dim, n.scale, n.softcap, n.window))
            dispatch("attention", (n.n_heads, t_count), (32, 1))
        elif isinstance(n, G.SelectRows):
            width = self.widths[n.out]
            bufs(self.values[n.x], ints["logit_rows"], self.values[n.out], struct.pack("<ii", width, r_count))
            dispatch("select_rows", (-(-(width * r_count) // 256), 1), (256, 1))
        else:
            raise BackendError(f"metal: no kernel for op {n.name!r}")
