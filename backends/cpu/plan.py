"""The cpu backend's plan: the graph turned once into a list of kernel calls on fixed buffers.

Each value of the graph gets a buffer [max_tokens, width] allocated at compile time; a pass
uses the first T rows. Matmuls over a sequence's rows take the decode kernel when that sequence
contributes few rows (decode, draft verification: the grouped kernel, int8 activations by default
or exact float ones) and tiles + BLAS otherwise, shared out over the plan's threads: the
choice depends only on the sequence's own rows, so the tokens a request gets never depend on
which other requests share the pass. A pass whose sequences all have few rows runs as compiled
stretches of these same steps (`program.py`), with the same bits.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numba
import numpy as np
from llamay_backends.cpu import extended, kernels, ops
from llamay_backends.cpu.program import Program
from llamay_backends.cpu.segment_attention import segment_attention

from llamay_core.backend_api import Batch
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_core.state.host_pages import HostPageStore

# A sequence with at most this many rows in a pass uses the grouped decode kernel, whose
# per-token results are the same bits whatever else shares the pass.
GROUPED_MAX_ROWS = 16


class PassInfo:
    """Per-pass index arrays, computed once per batch and shared by every step."""

    @property
    def pages(self) -> np.ndarray:
        """The KV page of each token (only graphs that write KV need it)."""
        if self._pages is None:
            self._pages = self.tables[self.seq_index, self.positions // self.page_size]
        return self._pages

    @property
    def slots(self) -> np.ndarray:
        return self.positions % self.page_size if self._slots is None else self._slots

    def __init__(self, batch: Batch, page_size: int) -> None:
        self.batch = batch
        self.n = n = batch.n_tokens
        # (tokens, positions, seq_index, tables, pages, slots, rows) as the compiled program takes
        # them, where they were built that way at once (`_one_token`); else None
        self.compiled_fields: tuple[np.ndarray, ...] | None = None
        self._slots: np.ndarray | None = None
        self.page_size = page_size
        self._pages: np.ndarray | None = None
        self.angles: dict[tuple[bytes, float], tuple[np.ndarray, np.ndarray]] = {}  # rope's, per frequencies
        self.large_segments = []  # contiguous row ranges of sequences with many rows
        if n == 1 and len(batch.page_tables) == 1 and len(batch.logit_rows) == 1:
            self._one_token(batch, page_size)
            return
        self.tokens = batch.tokens.astype(np.int64)
        self.positions = batch.positions.astype(np.int64)
        self.seq_index = batch.seq_index.astype(np.int64)
        self.rows = batch.logit_rows.astype(np.int64)
        if len(batch.page_tables) == 1:
            # one sequence, a decode token's case: the same fields without the per-sequence
            # counting below, whose NumPy calls cost ~10x their warm time here (the token's
            # weights have just streamed every cache level: ~90 us a token, qwen2.5-coder)
            self.tables = np.asarray(batch.page_tables[0], np.int64).reshape(1, -1)
            if self.tables.shape[1] == 0:
                self.tables = np.zeros((1, 1), np.int64)
            self.logits_small = len(self.rows) <= GROUPED_MAX_ROWS
            self.all_small = n <= GROUPED_MAX_ROWS
            self.small_rows = np.arange(n if self.all_small else 0, dtype=np.int64)
            if not self.all_small:
                self.large_segments.append((0, n))
            return
        width = max((len(t) for t in batch.page_tables), default=1)
        self.tables = np.zeros((len(batch.page_tables), max(width, 1)), np.int64)
        for s, table in enumerate(batch.page_tables):
            self.tables[s, :len(table)] = table
        per_seq = np.bincount(self.seq_index[self.rows], minlength=len(batch.page_tables)) if len(self.rows) else np.zeros(1)
        self.logits_small = bool(per_seq.max() <= GROUPED_MAX_ROWS)
        counts = np.bincount(self.seq_index, minlength=len(batch.page_tables))
        small = counts[self.seq_index] <= GROUPED_MAX_ROWS
        self.all_small = bool(small.all())
        self.small_rows = np.nonzero(small)[0]
        for s in np.nonzero(counts > GROUPED_MAX_ROWS)[0]:
            idx = np.nonzero(self.seq_index == s)[0]
            self.large_segments.append((int(idx[0]), int(idx[-1]) + 1))

    def _one_token(self, batch: Batch, page_size: int) -> None:
        # a decode token: every field a view of one int64 array filled from Python ints, one
        # NumPy allocation where the paths above make a dozen calls, each ~10x its warm time
        # here (the token's weights have just streamed through every cache level). With
        # `compiled_fields` and `team.thread_count_reader`, smollm2:135m's decode went from
        # 90-163 to 70-88 us a token between the plan's call and the team's region
        table = batch.page_tables[0]
        width = len(table)
        position = int(batch.positions[0])
        page = position // page_size
        # token, position, seq_index, row, small row, page, slot, then the page table
        fields = np.zeros(7 + max(width, 1), np.int64)
        fields[0] = batch.tokens[0]
        fields[1] = position
        fields[3] = batch.logit_rows[0]
        fields[6] = position % page_size
        fields[7:7 + width] = table
        self.tokens, self.positions, self.seq_index, self.rows = fields[0:1], fields[1:2], fields[2:3], fields[3:4]
        self.small_rows, self._slots = fields[4:5], fields[6:7]
        self.tables = fields[7:].reshape(1, -1)
        self.logits_small = self.all_small = True
        if page < width:  # else no page holds the position: `pages` raises as on the other paths
            fields[5] = table[page]
            self._pages = fields[5:6]
            self.compiled_fields = (self.tokens, self.positions, self.seq_index, self.tables, self._pages,
                                    self._slots, self.rows)


def _tokens_count(p: "PassInfo") -> int:
    return p.n


def _rows_count(p: "PassInfo") -> int:
    return p.n_rows


class CpuPlan:
    def __init__(self, graph: Graph, weights: dict[str, Any], store: HostPageStore, max_tokens: int,
                 int8_decode: bool = False, compiled_decode: bool = True) -> None:
        self.graph = graph
        self.int8_decode = int8_decode
        self.weights = weights
        self.store = store
        self.max_tokens = max_tokens
        self.buffers: dict[str, np.ndarray] = {}
        self._pool: ThreadPoolExecutor | None = None  # prefill GEMM workers, created on first use
        self._pool_workers = 0
        self._controller: Any = None  # threadpoolctl's, created on the first prefill pass
        self.steps: list[Callable[[PassInfo], None]] = []
        self._selected: set[str] = set()  # values holding only the rows whose logits are wanted
        self._free: dict[int, list[np.ndarray]] = {}  # buffers of dead values, by width
        self._q8_buffers: dict[int, np.ndarray] = {}  # prefill activations through the int8 scheme
        self._q8_key: dict[int, tuple[int, str, int, int]] = {}  # what each of those buffers holds
        self._passes = 0
        self.decode_calls: dict[str, kernels.DecodeCall] = {}  # each matmul's kernel for few rows, by output
        # few-row passes run as compiled stretches of these same steps (`program.py`)
        self.program = Program(self) if compiled_decode else None
        last_use = {}
        for i, node in enumerate(graph.nodes):
            for name in node.inputs():
                last_use[name] = i
        last_use[graph.output] = len(graph.nodes)
        for i, node in enumerate(graph.nodes):
            inputs = node.inputs()
            selected = isinstance(node, G.SelectRows) or any(i in self._selected for i in inputs if i)
            self._count = _rows_count if selected and not isinstance(node, G.SelectRows) else _tokens_count
            self.steps.append(self._step(node))
            if self.program is not None:
                self.program.add(node, self._count is _rows_count)
            if selected:
                self._selected.update(node.outputs())
            # A value's buffer is reused once its last reader has been planned (never by that
            # reader's own output, which was allocated before the release).
            for name in set(inputs):
                if last_use.get(name) == i:
                    buf = self.buffers[name]
                    self._free.setdefault(buf.shape[1], []).append(buf)
        self.dispatches_per_pass = len(self.steps)
        self._logits_width = self._value(graph.output).shape[1]
        if self.program is not None:
            self.program.finish()

    # -- buffers ------------------------------------------------------------------------------
    def _buffer(self, name: str, width: int) -> np.ndarray:
        free = self._free.get(width)
        buf = free.pop() if free else np.zeros((self.max_tokens, width), np.float32)
        self.buffers[name] = buf
        return buf

    def kv_pages(self, layer: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The layer's K and V pages as the compiled K/V writes take them: float32 as they are,
        float16 viewed as bytes where F16C rounds the writes as NumPy's stores round; None for
        other pages (vq8, float16 without F16C), which `HostPageStore.write` writes."""
        arrays = self.store.layer_arrays(layer)[:2]
        if self.store.spec.dtype == "f32":
            return arrays[0], arrays[1]
        if self.store.spec.dtype == "f16" and kernels.HAS_F16C:
            return arrays[0].view(np.uint8), arrays[1].view(np.uint8)
        return None

    def _value(self, name: str) -> np.ndarray:
        return self.buffers[name]

    # -- steps --------------------------------------------------------------------------------
    def _step(self, node: Any) -> Callable[[PassInfo], None]:
        w = self.weights
        count = self._count
        if isinstance(node, G.Embed):
            wt = w[node.weight]
            out = self._buffer(node.out, wt.shape[-1])
            factor = np.float32(node.scale)

            def embed(p: PassInfo) -> None:
                kernels.dequantize_rows(wt.code, wt.rows, p.tokens, out[:p.n])
                if factor != 1.0:
                    ops.scale(out[:p.n], factor, out[:p.n])
            return embed
        if isinstance(node, G.RmsNorm):
            x = self._value(node.x)
            out = self._buffer(node.out, x.shape[1])
            weight = w[node.weight].vector if node.weight else np.ones(1, np.float32)
            has_w, eps, group, off = node.weight is not None, float(node.eps), int(node.group), float(node.weight_offset)
            return lambda p: ops.rms_norm(x[:count(p)], weight, has_w, eps, group, off, out[:count(p)])
        if isinstance(node, G.MatMul):
            return self._matmul_step(node)
        if isinstance(node, (G.Add, G.Mul)):
            a, b = self._value(node.a), self._value(node.b)
            out = self._buffer(node.out, a.shape[1])
            fn = ops.add if isinstance(node, G.Add) else ops.mul
            return lambda p: fn(a[:count(p)], b[:count(p)], out[:count(p)])
        if isinstance(node, G.Scale):
            x = self._value(node.x)
            out = self._buffer(node.out, x.shape[1])
            f = np.float32(node.factor)
            return lambda p: ops.scale(x[:count(p)], f, out[:count(p)])
        if isinstance(node, G.Rope):
            x = self._value(node.x)
            out = self._buffer(node.out, x.shape[1])
            inv = node.base ** (-np.arange(0, node.n_rot, 2, dtype=np.float64) / node.n_rot)
            if node.mode not in ("normal", "neox"):
                raise ValueError(f"unknown rope mode {node.mode!r}")
            args = (node.n_heads, node.head_dim, node.n_rot, node.mode == "neox")
            angles = self.rope_angles(inv, float(node.freq_scale))

            def rope(p: PassInfo) -> None:
                cos, sin = angles(p)
                ops.rope_rotate(x[:count(p)], cos, sin, *args, out[:count(p)])
            return rope
        if isinstance(node, G.KvWrite):
            k, v = self._value(node.k), self._value(node.v)
            layer = node.layer
            store = self.store
            pages = self.kv_pages(layer)
            if pages is not None:
                ks, vs = pages
                return lambda p: ops.kv_write(k[:count(p)], v[:count(p)], p.pages, p.slots, ks, vs)
            return lambda p: store.write(layer, p.pages, p.slots, k[:count(p)], v[:count(p)])
        if isinstance(node, G.Attention):
            return self._attention_step(node)
        if isinstance(node, (G.SiluMul, G.GeluMul)):
            g, u = self._value(node.gate), self._value(node.up)
            out = self._buffer(node.out, g.shape[1])
            fn = ops.silu_mul if isinstance(node, G.SiluMul) else ops.gelu_mul
            return lambda p: fn(g[:count(p)], u[:count(p)], out[:count(p)])
        if isinstance(node, G.Softcap):
            x = self._value(node.x)
            out = self._buffer(node.out, x.shape[1])
            cap = float(node.cap)
            return lambda p: ops.softcap(x[:count(p)], cap, out[:count(p)])
        if isinstance(node, G.Input):
            out = self._buffer(node.out, node.width)

            def take_input(p: PassInfo) -> None:
                value = p.batch.inputs[node.out]
                out[:value.shape[0]] = value
            return take_input
        if isinstance(node, G.Export):
            x = self._value(node.x)

            def export(p: PassInfo) -> None:
                p.batch.outputs[node.x] = x[:count(p)].copy()
            return export
        if isinstance(node, G.SelectRows):
            x = self._value(node.x)
            out = self._buffer(node.out, x.shape[1])

            def select(p: PassInfo) -> None:
                np.take(x, p.rows, axis=0, out=out[:len(p.rows)])
                p.n_rows = len(p.rows)
            return select
        return extended.step(self, node)

    @staticmethod
    def rope_angles(inv_freq: np.ndarray, freq_scale: float) -> Callable[[PassInfo], tuple[np.ndarray, np.ndarray]]:
        """The pass's (cos, sin) for these frequencies (`ops.rope_angles`), computed by the first
        rope step that asks and shared by q and k of every layer that uses the same ones."""
        key = (inv_freq.tobytes(), freq_scale)

        def angles(p: PassInfo) -> tuple[np.ndarray, np.ndarray]:
            got = p.angles.get(key)
            if got is None:
                got = p.angles[key] = ops.rope_angles(p.positions, inv_freq, freq_scale)
            return got
        return angles

    def _matmul_step(self, node: G.MatMul) -> Callable[[PassInfo], None]:
        count = self._count
        wt = self.weights[node.weight]
        x = self._value(node.x)
        out = self._buffer(node.out, wt.shape[0])
        bias = self.weights[node.bias].vector if node.bias else None
        code, rows = wt.code, wt.rows
        after_select = node.x in self._selected
        # the logits matmul too, as llama.cpp's: float activations there cost gemma3:270m a third
        # of its decode (a 178 MB Q8_0 table: 8.2 ms a token against 5.6 on int8 dots), and the
        # calibrated conformance passes with it (docs/performance.md, eleventh session)
        int8 = self.int8_decode and kernels.uses_q8(code)
        # int8 decode reads the formats it can interleave eight rows at a time (`kernels/interleaved.py`)
        # from that layout only, and prefill rebuilds its tiles from it: one copy of the weight in use
        packed = wt.interleaved() if int8 else None
        # int8 (where `uses_q8`: AVX2 or VNNI dots): each row of X quantized on its own to int8 per
        # 32, integer dots, on the interleaved weight where there is one; float: the grouped
        # kernels. Every one gives a row the same bits alone or beside others.
        grouped = self.decode_calls[node.out] = kernels.decode_call(code, rows, packed, x.shape[1], int8=int8)
        weight, interleaved = (rows, False) if packed is None else (packed, True)

        # a prompt through the decode kernel itself, where it beats BLAS on dequantized tiles
        # (`kernels.INT8_PREFILL`): every row then has exactly the bits decode would give it
        int8_prefill = interleaved and code in kernels.INT8_PREFILL

        def large(a: int, b: int, p: PassInfo) -> None:
            if int8_prefill:
                grouped(x[a:b], out[a:b])
                return
            # int8: the activations the int8 kernels see, so a prompt's tokens get the same
            # activations whether the prompt comes at once or in small chunks
            xs = self._q8_scratch(node.x, a, b, p) if int8 else x[a:b]
            kernels.matmul(code, weight, xs, out[a:b], pool=p.pool, workers=p.workers, interleaved=interleaved)

        def matmul(p: PassInfo) -> None:
            n = count(p)
            if after_select:
                # logit rows: a few per sequence (decode, draft verification), or a whole prompt's
                # when logits() asked; the interleaved int8 kernel takes any number (each row then
                # has its decode bits), float activations BLAS tiles for many
                if p.logits_small or interleaved:
                    grouped(x[:n], out[:n])
                else:
                    kernels.matmul(code, rows, x[:n], out[:n], pool=p.pool, workers=p.workers)
            elif p.all_small:  # decode: each token's bits are the same alone or in any group
                grouped(x[:n], out[:n])
            else:
                if len(p.small_rows):
                    xs = x[p.small_rows]
                    os_ = np.empty((len(p.small_rows), out.shape[1]), np.float32)
                    grouped(xs, os_)
                    out[p.small_rows] = os_
                for a, b in p.large_segments:
                    large(a, b, p)
            if bias is not None:
                ops.add_bias(out[:n], bias)
        return matmul

    def _q8_scratch(self, name: str, a: int, b: int, p: PassInfo) -> np.ndarray:
        """Rows a..b of value `name` as the int8 scheme sees them; q, k and v (gate and up) share
        one copy. Keyed by the value's name: its buffer is reused by later values."""
        x = self._value(name)
        key = (p.serial, name, a, b)  # valid within this pass only
        buf = self._q8_buffers.get(x.shape[1])
        if buf is None:
            buf = self._q8_buffers[x.shape[1]] = np.empty((self.max_tokens, x.shape[1]), np.float32)
        out = buf[:b - a]
        if self._q8_key.get(x.shape[1]) != key:
            kernels.q8_roundtrip(x[a:b], out)
            self._q8_key[x.shape[1]] = key
        return out

    def _attention_step(self, node: G.Attention) -> Callable[[PassInfo], None]:
        count = self._count
        q = self._value(node.q)
        out = self._buffer(node.out, node.n_heads * node.value_dim)
        store = self.store
        args = (node.n_heads, node.n_kv_heads, node.key_dim, node.value_dim, float(node.scale),
                float(node.softcap), int(node.window))
        if store.spec.dtype == "f32":
            ks, vs = store.layer_arrays(node.layer)[:2]
            # prefill segments as GEMMs shared out over the plan's threads (`ops.attention_f32`)
            return lambda p: ops.attention_f32(q[:count(p)], p.positions, p.seq_index, p.tables, ks, vs, *args,
                                               out[:count(p)], p.large_segments, p.pool)
        layer = node.layer
        if store.spec.dtype == "f16" and node.key_dim % 32 == 0 and node.value_dim % 64 == 0:
            halfs = store.layer_arrays(layer)[:2]
            pages16 = tuple(h.view(np.uint8) for h in halfs)

            def attention_f16(p: PassInfo) -> None:
                # as `ops.attention_f32`: a prefill segment as GEMMs over its keys gathered as f32
                # (`segment_attention` converts the pages it gathers); every other row (decode,
                # drafts) reads the pages in place, two bytes a value (`ops._attention_vec` on the
                # pages viewed as bytes: gathering a sequence's keys as f32 for each layer cost 28 s
                # for 64 tokens at 4,096 keys of smollm2:135m)
                for a, b in p.large_segments:
                    segment_attention(q, p.positions, p.tables[p.seq_index[a]], *halfs, *args, a, b, out, p.pool)
                rows = p.small_rows if p.large_segments else np.arange(count(p), dtype=np.int64)
                if len(rows):
                    ops._attention_vec(q, p.positions, p.seq_index, p.tables, *pages16, *args, rows, out)
            return attention_f16

        def attention_dequantizing(p: PassInfo) -> None:
            # vq8 pages, and f16 pages of heads the vector kernel cannot take: gather each
            # sequence as f32 once per layer, then the float32 path
            seqs = np.unique(p.seq_index)
            for s in seqs:
                idx = np.nonzero(p.seq_index == s)[0]
                length = int(p.positions[idx].max()) + 1
                k, v = store.gather(layer, p.tables[s], length)
                ps = store.spec.page_size
                n_pages = -(-length // ps)
                kp = np.zeros((n_pages * ps, k.shape[1]), np.float32)
                vp = np.zeros((n_pages * ps, v.shape[1]), np.float32)
                kp[:length], vp[:length] = k, v
                table = np.arange(n_pages, dtype=np.int64)[None, :]
                result = np.empty((len(idx), out.shape[1]), np.float32)  # out[idx] would be a copy
                segments = [(0, len(idx))] if len(idx) > GROUPED_MAX_ROWS else []
                ops.attention_f32(np.ascontiguousarray(q[idx]), p.positions[idx], np.zeros(len(idx), np.int64), table,
                                  kp.reshape(n_pages, ps, -1), vp.reshape(n_pages, ps, -1), *args, result, segments,
                                  p.pool)
                out[idx] = result
        return attention_dequantizing

    # -- running ------------------------------------------------------------------------------
    def __call__(self, batch: Batch) -> np.ndarray:
        p = PassInfo(batch, self.store.spec.page_size)
        self._passes += 1
        p.serial = self._passes
        if p.n > self.max_tokens:
            raise ValueError(f"{p.n} tokens exceed the cpu backend's pass of {self.max_tokens}")
        p.n_rows = p.n
        p.pool, p.workers = None, 1
        if p.large_segments:
            # BLAS gets one thread while Numba's OpenMP pool holds the cores: the two pools
            # otherwise spin against each other between calls (measured: 150 vs 210 tok/s).
            # The prefill GEMMs still use every core: their tiles are shared out over this
            # plan's own threads, each running a one-thread sgemm.
            p.workers = numba.get_num_threads()
            p.pool = self._gemm_pool(p.workers)
            with self._blas_limit(limits=1, user_api="blas"):
                for step in self.steps:
                    step(p)
        elif self.program is not None and p.all_small and p.logits_small:
            if self.program.logits_direct:
                logits = np.empty((len(p.rows), self._logits_width), np.float32)
                self.program(p, logits)
                return logits
            self.program(p)
        else:
            for step in self.steps:
                step(p)
        return self._value(self.graph.output)[:len(p.rows)].copy()

    def _gemm_pool(self, workers: int) -> ThreadPoolExecutor | None:
        if workers <= 1:
            return None
        if self._pool is None or self._pool_workers != workers:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llamay-gemm")
            self._pool_workers = workers
        return self._pool

    @property
    def _blas_limit(self) -> Any:
        if self._controller is None:  # finding the BLAS libraries takes ~0.1 s: only when prefill needs it
            from threadpoolctl import ThreadpoolController

            self._controller = ThreadpoolController()
        return self._controller.limit

    def warm_up(self) -> None:
        """Touch every activation buffer once, so no pass pays first-touch page faults."""
        seen = set()
        for name, buf in self.buffers.items():
            if id(buf) not in seen and name != self.graph.output:
                seen.add(id(buf))
                buf.fill(0.0)
