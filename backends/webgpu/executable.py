"""The compiled graph: every pipeline and bind group built once; a pass writes the pass table,
records all dispatches into one compute pass of one command encoder, and submits once.

A segment of a split graph (llamay_core/engine/split.py) starts with `input` ops, whose values
the host writes before the submit, and ends with `export` ops, whose values are copied out with
the output after the compute pass."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from llamay_core.backend_api import Batch
from llamay_core.errors import BackendError
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.webgpu.device import Gpu
from llamay_backends.webgpu.kernels import Pipelines
from llamay_backends.webgpu.page_store import WebGPUPageStore
from llamay_backends.webgpu.plan import (ELEMENTWISE, LOGIT_ROWS, TOKENS, ActivationPool, Dispatch, linear_grid,
                                         last_uses, infer_shapes, pack_params)
from llamay_backends.webgpu.weights import WebGPUWeights

MM_ROWS, MM_TOKENS = 4, 8  # rows and tokens per matmul workgroup (matmul.wgsl ROWS, TT)
HEADER_WORDS = 16
MAX_ROPE_TABLES = HEADER_WORDS - 10
MAX_HEAD_DIM = 256  # attention.wgsl keeps q in 256 floats of shared memory and 4 value dims per thread


class WebGPUExecutable:
    def __init__(self, gpu: Gpu, pipelines: Pipelines, graph: Graph, weights: WebGPUWeights,
                 store: WebGPUPageStore, max_tokens: int) -> None:
        self.gpu, self.pipelines, self.graph, self.weights, self.store = gpu, pipelines, graph, weights, store
        self.max_tokens = max_tokens
        self.shapes = infer_shapes(graph, weights)
        self.writes_kv = any(isinstance(n, G.KvWrite) for n in graph.nodes)
        self.inputs = [n.out for n in graph.nodes if isinstance(n, G.Input)]
        self.exports = [n.x for n in graph.nodes if isinstance(n, G.Export)]
        # Logit rows per pass are capped so the logits fit one binding; more rows run as repeat passes.
        self.max_rows = max(1, min(max_tokens, gpu.max_binding_bytes // (4 * max(
            [s.width for s in self.shapes.values() if s.rows == LOGIT_ROWS] or [1]))))
        # (frequency per rotated pair, mscale) of each rope table in the pass table
        self.rope_configs: list[tuple[tuple[float, ...], float]] = []
        self.params = bytearray()
        self.dispatches: list[Dispatch] = []
        usage = gpu.wgpu.BufferUsage
        self.dummy = gpu.device.create_buffer(size=16, usage=usage.STORAGE)
        self.pool = ActivationPool(gpu)
        self.buffers: dict[str, Any] = {}
        self._plan()
        self.params_buffer = gpu.device.create_buffer_with_data(data=bytes(self.params), usage=usage.UNIFORM)
        self.pass_capacity = 0
        self.pass_buffer = None
        self._ensure_pass_capacity(self._pass_words_estimate())
        self.staging = {}  # value read back after the pass -> its mappable copy
        for name in dict.fromkeys([graph.output, *self.exports]):
            shape = self.shapes[name]
            rows = self.max_rows if shape.rows == LOGIT_ROWS else max_tokens
            self.staging[name] = gpu.device.create_buffer(size=rows * shape.width * 4,
                                                          usage=usage.MAP_READ | usage.COPY_DST)
        self.last_encode_s = self.last_gpu_s = 0.0
        self.last_dispatches = 0
        self.submits = 0

    # ---- planning (once) ----

    def _plan(self) -> None:
        last = last_uses(self.graph)
        for i, node in enumerate(self.graph.nodes):
            for out in node.outputs():
                shape = self.shapes[out]
                rows = self.max_rows if shape.rows == LOGIT_ROWS else self.max_tokens
                self.buffers[out] = self.pool.take(rows * shape.width * 4, fresh=isinstance(node, G.Input))
            self._add_node(node)
            for name in set(node.inputs()):
                if last[name] == i:
                    self.pool.give(self.buffers[name])

    def _dispatch(self, kernel: str, type_name: str | None, bindings: dict[int, Any], params: bytes, grid) -> None:
        align = self.gpu.uniform_alignment
        offset = -(-len(self.params) // align) * align
        self.params.extend(b"\0" * (offset - len(self.params)))
        self.params.extend(params)
        self.dispatches.append(Dispatch(kernel, self.pipelines.get(kernel, type_name), bindings, offset,
                                        len(params), grid))

    def _add_node(self, node: Any) -> None:
        b, shapes = self.buffers, self.shapes
        if isinstance(node, G.Embed):
            m = self.weights.matrices[node.weight]
            width = m.shape[1]
            n_sub = -(-width // 32)
            for c in m.chunks:
                self._dispatch("embed", m.type_name, {2: c.buffer, 3: b[node.out]},
                               pack_params(width, c.row0, c.n_rows, c.header_word, float(node.scale)),
                               lambda t, r, n=-(-n_sub // 64): (n, t, 1))
        elif isinstance(node, G.MatMul):
            m = self.weights.matrices[node.weight]
            if m.shape[1] % 32:
                raise BackendError(f"webgpu: matmul over {node.weight} needs rows a multiple of 32, not {m.shape[1]}")
            kind = shapes[node.x].rows
            bias = self.weights.vectors[node.bias].buffer if node.bias else self.dummy
            for c in m.chunks:
                self._dispatch("matmul", m.type_name, {2: c.buffer, 3: b[node.x], 4: b[node.out], 5: bias},
                               pack_params(m.shape[0], m.shape[1], kind, c.row0, c.n_rows, int(bool(node.bias)),
                                           c.header_word),
                               lambda t, r, x=-(-c.n_rows // MM_ROWS), k=kind: (x, -(-(t, r)[k] // MM_TOKENS), 1))
        elif isinstance(node, G.RmsNorm):
            s = shapes[node.x]
            group = node.group or s.width
            weight = self.weights.vectors[node.weight].buffer if node.weight else self.dummy
            self._dispatch("rms_norm", None, {2: b[node.x], 3: weight, 4: b[node.out]},
                           pack_params(s.width, group, s.rows, int(bool(node.weight)), float(node.eps),
                                       float(node.weight_offset)),
                           lambda t, r, n=s.width // group, k=s.rows: (n, (t, r)[k], 1))
        elif isinstance(node, G.Rope):
            inv_freq = node.base ** (-np.arange(0, node.n_rot, 2, dtype=np.float64) / node.n_rot)
            self._add_rope(node, tuple(float(f) for f in node.freq_scale * inv_freq), 1.0)
        elif isinstance(node, G.RopeTable):
            if len(node.freqs) != node.n_rot // 2:
                raise BackendError(f"webgpu: rope_table has {len(node.freqs)} frequencies for {node.n_rot} dims")
            self._add_rope(node, tuple(float(f) for f in node.freqs), float(node.mscale))
        elif isinstance(node, G.Columns):
            s = shapes[node.x]
            if node.start < 0 or node.start + node.width > s.width:
                raise BackendError(f"webgpu: columns {node.start}:{node.start + node.width} of {node.x} "
                                   f"outside its {s.width}")
            self._dispatch("columns", None, {2: b[node.x], 3: b[node.out]},
                           pack_params(s.width, node.start, node.width, s.rows), linear_grid(node.width, s.rows))
        elif isinstance(node, (G.Input, G.Export)):
            pass  # no dispatch: the host writes inputs before the pass and reads exports after it
        elif isinstance(node, G.KvWrite):
            kc, vc = self.store.layer_buffers(node.layer)
            kw, vw = self.store.widths
            self._dispatch("kv_write", None, {2: b[node.k], 3: b[node.v], 4: kc, 5: vc}, pack_params(kw, vw),
                           lambda t, r, n=-(-max(kw, vw) // 64): (n, t, 1))
        elif isinstance(node, G.Attention):
            if max(node.key_dim, node.value_dim) > MAX_HEAD_DIM:
                raise BackendError(f"webgpu: attention head size over {MAX_HEAD_DIM}")
            kc, vc = self.store.layer_buffers(node.layer)
            self._dispatch("attention", None, {2: b[node.q], 3: kc, 4: vc, 5: b[node.out]},
                           pack_params(node.n_heads, node.n_heads // node.n_kv_heads, node.key_dim, node.value_dim,
                                       float(node.scale), float(node.softcap), node.window,
                                       self.store.spec.page_size),
                           lambda t, r, h=node.n_heads: (h, t, 1))
        else:
            self._add_elementwise(node)

    def _add_rope(self, node: G.Rope | G.RopeTable, freqs: tuple[float, ...], mscale: float) -> None:
        """Both ropes read cos/sin of position * freqs[i] (times mscale) from the pass table."""
        if self.shapes[node.x].rows != TOKENS:
            raise BackendError(f"webgpu: {node.name} on logit rows is not supported")
        if node.mode not in ("normal", "neox"):
            raise BackendError(f"webgpu: unknown rope mode {node.mode!r}")
        key = (freqs, mscale)
        if key not in self.rope_configs:
            if len(self.rope_configs) == MAX_ROPE_TABLES:
                raise BackendError(f"webgpu: more than {MAX_ROPE_TABLES} rope configurations in one graph")
            self.rope_configs.append(key)
        width = node.n_heads * node.head_dim
        self._dispatch("rope", None, {2: self.buffers[node.x], 3: self.buffers[node.out]},
                       pack_params(width, node.head_dim, node.n_rot, int(node.mode == "neox"),
                                   self.rope_configs.index(key)),
                       linear_grid(width, TOKENS))

    def _add_elementwise(self, node: Any) -> None:
        b = self.buffers
        ins = node.inputs()
        first, second = ins[0], ins[-1]  # unary ops read their one input twice
        factor = float(getattr(node, "factor", getattr(node, "cap", 0.0)))
        shape = self.shapes[node.out]
        self._dispatch("elementwise", None, {2: b[first], 3: b[second], 4: b[node.out]},
                       pack_params(ELEMENTWISE[node.name], shape.width, shape.rows, factor),
                       linear_grid(shape.width, shape.rows))

    def _build_bind_groups(self) -> None:
        device = self.gpu.device
        for d in self.dispatches:
            entries = [{"binding": 0, "resource": {"buffer": self.pass_buffer, "offset": 0, "size": self.pass_buffer.size}},
                       {"binding": 1, "resource": {"buffer": self.params_buffer, "offset": d.params_offset,
                                                   "size": d.params_size}}]
            entries += [{"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
                        for i, buf in sorted(d.bindings.items())]
            d.bind_group = device.create_bind_group(layout=d.pipeline.get_bind_group_layout(0), entries=entries)

    def _pass_words_estimate(self) -> int:
        half = sum(len(freqs) for freqs, _ in self.rope_configs)
        return HEADER_WORDS + 6 * self.max_tokens + self.store.spec.max_pages + 2 * half * self.max_tokens

    def _ensure_pass_capacity(self, words: int) -> None:
        if words <= self.pass_capacity:
            return
        usage = self.gpu.wgpu.BufferUsage
        self.pass_capacity = max(words, 2 * self.pass_capacity)
        self.pass_buffer = self.gpu.device.create_buffer(size=4 * self.pass_capacity,
                                                         usage=usage.STORAGE | usage.COPY_DST)
        self._build_bind_groups()

    # ---- per pass ----

    def pass_table(self, batch: Batch, rows: np.ndarray) -> np.ndarray:
        """The u32 words every kernel reads: counts, token ids, positions, KV slots, page tables, rope."""
        ps = self.store.spec.page_size
        t = batch.n_tokens
        needed = [-(-int(n) // ps) for n in batch.kv_lens]
        tables = np.concatenate([np.asarray(pt[:n], np.uint32) for pt, n in zip(batch.page_tables, needed)])
        table_off = np.concatenate([[0], np.cumsum(needed)[:-1]]).astype(np.uint32)
        positions = batch.positions.astype(np.int64)
        seq = batch.seq_index.astype(np.int64)
        if self.writes_kv:
            kv_rows = tables[table_off[seq] + positions // ps].astype(np.int64) * ps + positions % ps
        else:  # no kv_write in the graph: page tables may be empty
            kv_rows = np.zeros(t, np.int64)
        parts = [batch.tokens, batch.positions, batch.seq_index, kv_rows, rows, table_off, tables]
        for freqs, mscale in self.rope_configs:
            theta = positions.astype(np.float64)[:, None] * np.asarray(freqs, np.float64)[None, :]
            cs = mscale * np.stack([np.cos(theta), np.sin(theta)], axis=-1)
            parts.append(cs.astype(np.float32).view(np.uint32))
        header = np.zeros(HEADER_WORDS, np.uint32)
        header[0], header[1] = t, len(rows)
        at = HEADER_WORDS
        flat = []
        for i, part in enumerate(parts):
            part = np.ascontiguousarray(part).reshape(-1).astype(np.uint32, copy=False)
            header[2 + i if i < 7 else 10 + i - 7] = at
            flat.append(part)
            at += part.size
        return np.concatenate([header] + flat)

    def __call__(self, batch: Batch) -> np.ndarray:
        if batch.n_tokens > self.max_tokens:
            raise BackendError(f"webgpu: {batch.n_tokens} tokens in one pass, over its {self.max_tokens}")
        rows = np.asarray(batch.logit_rows, np.uint32)
        if len(rows) <= self.max_rows or all(s.rows != LOGIT_ROWS for s in self.shapes.values()):
            parts = [self._run(batch, rows)]
        else:
            # KV writes are idempotent, so a pass asking for more logit rows than fit is simply repeated.
            parts = [self._run(batch, rows[i:i + self.max_rows]) for i in range(0, len(rows), self.max_rows)]
        values = {name: np.concatenate([p[name] for p in parts]) if self.shapes[name].rows == LOGIT_ROWS
                  else parts[-1][name] for name in self.staging}
        for name in self.exports:
            batch.outputs[name] = values[name]
        return values[self.graph.output]  # a graph without select_rows: every token's row, as reference

    def _write_inputs(self, batch: Batch) -> None:
        for name in self.inputs:
            width = self.shapes[name].width
            data = np.ascontiguousarray(batch.inputs[name], np.float32)
            if data.ndim != 2 or data.shape[1] != width or data.shape[0] > self.max_tokens:
                raise BackendError(f"webgpu: input {name!r} is {data.shape}, not [<= {self.max_tokens}, {width}]")
            self.gpu.device.queue.write_buffer(self.buffers[name], 0, data)

    def _run(self, batch: Batch, rows: np.ndarray) -> dict[str, np.ndarray]:
        """One submit; the values read back (the output and the exports) by name."""
        t0 = time.perf_counter()
        table = self.pass_table(batch, rows)
        self._ensure_pass_capacity(table.size)
        device = self.gpu.device
        device.queue.write_buffer(self.pass_buffer, 0, table)
        self._write_inputs(batch)
        t, r = batch.n_tokens, len(rows)
        enc = device.create_command_encoder()
        cp = enc.begin_compute_pass()
        current = None
        for d in self.dispatches:
            if d.pipeline is not current:
                cp.set_pipeline(d.pipeline)
                current = d.pipeline
            cp.set_bind_group(0, d.bind_group)
            cp.dispatch_workgroups(*d.grid(t, r))
        cp.end()
        counts = {}
        for name, staging in self.staging.items():
            shape = self.shapes[name]
            counts[name] = r if shape.rows == LOGIT_ROWS else t
            enc.copy_buffer_to_buffer(self.buffers[name], 0, staging, 0, counts[name] * shape.width * 4)
        device.queue.submit([enc.finish()])
        t1 = time.perf_counter()
        out = {}
        for name, staging in self.staging.items():
            n, width = counts[name], self.shapes[name].width
            staging.map_sync(self.gpu.wgpu.MapMode.READ, 0, n * width * 4)
            try:
                out[name] = np.frombuffer(staging.read_mapped(0, n * width * 4), np.float32).reshape(n, width).copy()
            finally:
                staging.unmap()
        t2 = time.perf_counter()
        self.last_encode_s, self.last_gpu_s = t1 - t0, t2 - t1
        self.last_dispatches = len(self.dispatches)
        self.submits += 1
        return out
