"""A graph compiled into a Vulkan plan: buffers, descriptor sets and dispatches made once.

Each pass uploads the batch metadata (tokens, positions, page tables) into one host-visible
buffer and submits one command buffer. Command buffers are recorded per batch shape (tokens,
logit rows) and replayed, so a decode step costs one metadata write, one submit and one read.
A matmul also does the add of a residual to its output and the silu/gelu_mul making its input
(see _find_fusions), which saves two dispatches per layer of a llama-like model.

A segment of a split graph (llamay_core/engine/split.py) starts with `input` ops and ends with
`export` ops: inputs get host-visible buffers written before the submit, exported values keep
host-visible buffers of their own, read after it.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable

import attrs
import numpy as np

from llamay_backends.vulkan.device import Buffer, Device
from llamay_backends.vulkan.page_store import VulkanPageStore
from llamay_backends.vulkan.weights import DeviceTensor, DeviceWeights
from llamay_core.backend_api import Batch
from llamay_core.errors import BackendError
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph

MATMUL_TILE, MATMUL_ROWS = 8, 4  # tokens and weight rows per matmul workgroup (matmul.comp)
ELEMENTWISE = {"add": 0, "mul": 1, "scale": 2, "softcap": 3, "silu_mul": 4, "gelu_mul": 5}
CACHED_SHAPES = 8  # recorded command buffers kept (decode's shape is always among them)
# The binding each kernel writes; every other bound buffer is only read.
WRITTEN_SLOT = {"matmul": 2, "get_rows": 2, "rms_norm": 2, "elementwise": 3, "rope": 2, "kv_write": 3,
                "attention": 2, "select_rows": 2, "columns": 2}


def f32_bits(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def spread(n: int, limit: int) -> tuple[int, int, int]:
    """Workgroup counts for n groups within the per-dimension limit (x, then y)."""
    n = max(n, 1)
    x = min(n, limit)
    return x, -(-n // x), 1


@attrs.define
class Value:
    width: int
    per_token: bool  # rows = tokens of the pass; False: rows = logit rows (after select_rows)
    buffer: Buffer | None = None


@attrs.define
class MatMulFusion:
    """Work a matmul takes over: an add (its residual operand) and/or the silu/gelu_mul making x."""

    add: int | None = None
    residual: str | None = None
    glu: int | None = None


@attrs.define
class Step:
    """One dispatch: its kernel, descriptor set, and push words / groups for a (T, R) shape."""

    kernel: str
    dset: Any
    shape: Callable[[int, int], tuple[list[int], tuple[int, int, int]]]
    reads: frozenset[int]  # ids of the buffers it reads
    writes: frozenset[int]


class VulkanPlan:
    """The executable: `plan(batch)` runs one forward pass and returns float32 logits."""

    def __init__(self, device: Device, graph: Graph, weights: DeviceWeights, store: VulkanPageStore,
                 max_tokens: int) -> None:
        self.device, self.graph, self.weights, self.store = device, graph, weights, store
        self.tmax = max_tokens
        self.words = "" if device.storage16 else "_w32"
        self.values = self._infer_values()
        self.inputs = [n.out for n in graph.nodes if isinstance(n, G.Input)]
        self.exports = [n.x for n in graph.nodes if isinstance(n, G.Export)]
        self.fused = self._find_fusions()
        self.meta_capacity = 6 * self.tmax + 4 * store.spec.max_pages + 1024
        self.meta: Buffer | None = None
        self.buffers: list[Buffer] = []
        self.steps: list[Step] = []
        self._commands: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self.barriers = 0
        self.encode_seconds = 0.0
        self.execute_seconds = 0.0
        self.passes = 0
        self.tokens = 0
        self._build()

    # ---- compile -----------------------------------------------------------------------------

    def _tensor(self, name: str) -> DeviceTensor:
        return self.weights.tensors[name]

    def _infer_values(self) -> dict[str, Value]:
        values: dict[str, Value] = {}
        for node in self.graph.nodes:
            if isinstance(node, G.Embed):
                values[node.out] = Value(self._tensor(node.weight).cols, True)
            elif isinstance(node, G.MatMul):
                values[node.out] = Value(self._tensor(node.weight).rows, values[node.x].per_token)
            elif isinstance(node, G.Attention):
                values[node.out] = Value(node.n_heads * node.value_dim, values[node.q].per_token)
            elif isinstance(node, G.SelectRows):
                values[node.out] = Value(values[node.x].width, False)
            elif isinstance(node, (G.Add, G.Mul)):
                values[node.out] = Value(values[node.a].width, values[node.a].per_token)
            elif isinstance(node, (G.SiluMul, G.GeluMul)):
                values[node.out] = Value(values[node.gate].width, values[node.gate].per_token)
            elif isinstance(node, (G.RmsNorm, G.Scale, G.Softcap, G.Rope, G.RopeTable)):
                values[node.out] = Value(values[node.x].width, values[node.x].per_token)
            elif isinstance(node, G.Columns):
                values[node.out] = Value(node.width, values[node.x].per_token)
            elif isinstance(node, G.Input):
                # as on cpu, a handed-in value has a row per token of the pass
                values[node.out] = Value(node.width, True)
            elif not isinstance(node, (G.KvWrite, G.Export)):
                raise BackendError(f"vulkan backend has no op {node.name!r}")
        return values

    def _find_fusions(self) -> dict[int, MatMulFusion]:
        """Matmuls that also do their neighbours' work, by matmul index.

        An add of an earlier value to a matmul's output becomes the matmul's residual; a
        silu_mul/gelu_mul whose only reader is a matmul is computed while that matmul loads x.
        """
        nodes = self.graph.nodes
        producer: dict[str, int] = {}
        uses: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for name in node.inputs():
                uses[name] = uses.get(name, 0) + 1
            for name in node.outputs():
                producer[name] = i
        fusions: dict[int, MatMulFusion] = {}

        def single_use(name: str) -> bool:
            return uses.get(name) == 1 and name != self.graph.output

        for i, node in enumerate(nodes):
            if isinstance(node, G.MatMul):
                j = producer.get(node.x, -1)
                if j >= 0 and isinstance(nodes[j], (G.SiluMul, G.GeluMul)) and single_use(node.x):
                    fusions.setdefault(i, MatMulFusion()).glu = j
            if not isinstance(node, G.Add):
                continue
            for mine, other in ((node.a, node.b), (node.b, node.a)):
                j = producer.get(mine, -1)
                if (j >= 0 and isinstance(nodes[j], G.MatMul) and single_use(mine)
                        and producer.get(other, len(nodes)) < j and self.values[other].width == self.values[mine].width):
                    fusion = fusions.setdefault(j, MatMulFusion())
                    fusion.add, fusion.residual = i, other
                    break
        return fusions

    def _absorbed(self) -> dict[int, int]:
        """Node index -> index of the matmul that does its work."""
        absorbed = {}
        for m, f in self.fused.items():
            for i in (f.add, f.glu):
                if i is not None:
                    absorbed[i] = m
        return absorbed

    def _allocate(self) -> None:
        """Buffers for the values, reused once a value is dead.

        The output and exported values get host-visible buffers of their own (the host reads them
        after the pass); so do inputs (the host writes them before it; a reused buffer could
        still be in use by an earlier dispatch of the same pass).
        """
        nodes = self.graph.nodes
        kept = {self.graph.output, *self.exports}
        absorbed = self._absorbed()
        last_use: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for name in node.inputs():
                last_use[name] = max(last_use.get(name, -1), absorbed.get(i, i))
        free: list[Buffer] = []
        for i, node in enumerate(nodes):
            if i in absorbed:
                continue
            fusion = self.fused.get(i)
            name = nodes[fusion.add].out if fusion and fusion.add is not None else next(iter(node.outputs()), None)
            if name:
                value = self.values[name]
                size = self.tmax * value.width * 4
                if size > self.device.max_binding:
                    raise BackendError(f"{name} needs {size / 2**20:.0f} MiB for {self.tmax} tokens, more than this "
                                       f"device's storage binding of {self.device.max_binding / 2**20:.0f} MiB")
                if name in kept or isinstance(node, G.Input):
                    value.buffer = Buffer(self.device, size, host_visible=True)
                    self.buffers.append(value.buffer)
                else:
                    fits = sorted((b for b in free if b.size >= size), key=lambda b: b.size)
                    if fits:
                        value.buffer = fits[0]
                        free.remove(fits[0])
                    else:
                        value.buffer = Buffer(self.device, size, host_visible=False)
                        self.buffers.append(value.buffer)
            for dead in [n for n, last in last_use.items() if last == i]:
                buf = self.values[dead].buffer
                if buf is not None and dead not in kept and buf not in free:
                    free.append(buf)

    def _build(self) -> None:
        self.meta = Buffer(self.device, 4 * self.meta_capacity, host_visible=True)
        self._allocate()
        absorbed = self._absorbed()
        for i, node in enumerate(self.graph.nodes):
            if i in absorbed:
                continue
            if isinstance(node, G.MatMul):
                self._matmul(node, self.fused.get(i))
            else:
                getattr(self, "_" + node.name)(node)

    def _step(self, kernel: str, dset: Any, slots: dict, shape: Callable) -> Step:
        bound = {slot: b if isinstance(b, Buffer) else b[0] for slot, b in slots.items() if b is not None}
        written = WRITTEN_SLOT[next(k for k in WRITTEN_SLOT if kernel.startswith(k))]
        return Step(kernel, dset, shape, frozenset(id(b) for slot, b in bound.items() if slot != written),
                    frozenset({id(bound[written])}))

    def _bind(self, slots: dict[int, Buffer | tuple[Buffer, int, int] | None]) -> Any:
        entries: list[tuple[Buffer, int, int] | None] = [None] * 8
        for slot, b in slots.items():
            if isinstance(b, Buffer):
                entries[slot] = (b, 0, b.size)
            else:
                entries[slot] = b
        entries[7] = (self.meta, 0, self.meta.size)
        return self.device.descriptor_set(entries)

    def _rows(self, name: str, t: int, r: int) -> int:
        return t if self.values[name].per_token else r

    def _buf(self, name: str) -> Buffer:
        return self.values[name].buffer

    def _add_step(self, kernel: str, slots: dict, shape: Callable) -> None:
        self.steps.append(self._step(kernel, self._bind(slots), slots, shape))

    def _embed(self, node: G.Embed) -> None:
        w = self._tensor(node.weight)
        for c in w.chunks:
            self._add_step(f"get_rows_{w.type_name}{self.words}", {0: (c.buffer, 0, c.n_bytes), 2: self._buf(node.out)},
                           lambda t, r, c=c: ([w.cols, c.row_start, c.n_rows, f32_bits(node.scale)], (t, 1, 1)))

    def _matmul(self, node: G.MatMul, fusion: MatMulFusion | None = None) -> None:
        w = self._tensor(node.weight)
        if w.cols % 32:
            raise BackendError(f"vulkan matmul reads rows in units of 32 values; {node.weight} has {w.cols}")
        fusion = fusion or MatMulFusion()
        out = self.graph.nodes[fusion.add].out if fusion.add is not None else node.out
        glu = self.graph.nodes[fusion.glu] if fusion.glu is not None else None
        bias = self._tensor(node.bias).chunks[0] if node.bias else None
        flags = (1 if bias else 0) | (2 if fusion.residual else 0)
        if glu is not None:
            flags |= 4 if isinstance(glu, G.SiluMul) else 8
        limit = self.device.max_groups * MATMUL_ROWS
        for c in w.chunks:
            slots = {0: (c.buffer, 0, c.n_bytes), 1: self._buf(glu.gate if glu else node.x), 2: self._buf(out)}
            if bias:
                slots[3] = (bias.buffer, 0, bias.n_bytes)
            if fusion.residual:
                slots[4] = self._buf(fusion.residual)
            if glu is not None:
                slots[5] = self._buf(glu.up)
            dset = self._bind(slots)
            for base in range(0, c.n_rows, limit):
                n = min(limit, c.n_rows - base)
                self.steps.append(self._step(
                    f"matmul_{w.type_name}{self.words}", dset, slots,
                    lambda t, r, c=c, base=base, n=n: (
                        [w.cols, self._rows(node.x, t, r), c.row_start, w.rows, flags, base, c.n_rows],
                        (-(-n // MATMUL_ROWS), -(-self._rows(node.x, t, r) // MATMUL_TILE), 1))))

    def _rms_norm(self, node: G.RmsNorm) -> None:
        width = self.values[node.x].width
        group = node.group or width
        slots = {1: self._buf(node.x), 2: self._buf(node.out)}
        if node.weight:
            c = self._tensor(node.weight).chunks[0]
            slots[3] = (c.buffer, 0, c.n_bytes)
        self._add_step("rms_norm", slots, lambda t, r: (
            [width, group, f32_bits(node.eps), f32_bits(node.weight_offset), 1 if node.weight else 0],
            (self._rows(node.x, t, r), width // group, 1)))

    def _elementwise(self, op: str, a: str, b: str | None, out: str, param: float = 0.0) -> None:
        width = self.values[a].width
        slots = {1: self._buf(a), 3: self._buf(out)}
        if b:
            slots[2] = self._buf(b)
        limit = self.device.max_groups
        self._add_step("elementwise", slots, lambda t, r: (
            [self._rows(a, t, r) * width, ELEMENTWISE[op], f32_bits(param)],
            spread(-(-self._rows(a, t, r) * width // 256), limit)))

    def _add(self, node: G.Add) -> None:
        self._elementwise("add", node.a, node.b, node.out)

    def _mul(self, node: G.Mul) -> None:
        self._elementwise("mul", node.a, node.b, node.out)

    def _scale(self, node: G.Scale) -> None:
        self._elementwise("scale", node.x, None, node.out, node.factor)

    def _softcap(self, node: G.Softcap) -> None:
        self._elementwise("softcap", node.x, None, node.out, node.cap)

    def _silu_mul(self, node: G.SiluMul) -> None:
        self._elementwise("silu_mul", node.gate, node.up, node.out)

    def _gelu_mul(self, node: G.GeluMul) -> None:
        self._elementwise("gelu_mul", node.gate, node.up, node.out)

    def _rope(self, node: G.Rope) -> None:
        if node.mode not in ("normal", "neox"):
            raise BackendError(f"unknown rope mode {node.mode!r}")
        half = node.head_dim // 2
        limit = self.device.max_groups
        self._add_step("rope", {1: self._buf(node.x), 2: self._buf(node.out)}, lambda t, r: (
            [t, node.n_heads, node.head_dim, node.n_rot, 1 if node.mode == "neox" else 0, f32_bits(node.base),
             f32_bits(node.freq_scale)],
            spread(-(-t * node.n_heads * half // 64), limit)))

    def _rope_table(self, node: G.RopeTable) -> None:
        if node.mode not in ("normal", "neox"):
            raise BackendError(f"unknown rope mode {node.mode!r}")
        if len(node.freqs) != node.n_rot // 2:
            raise BackendError(f"rope_table has {len(node.freqs)} frequencies for {node.n_rot} rotated dims")
        freqs = Buffer(self.device, 4 * len(node.freqs), host_visible=False)
        freqs.write(np.asarray(node.freqs, np.float32))
        self.buffers.append(freqs)
        half = node.head_dim // 2
        limit = self.device.max_groups
        self._add_step("rope_table", {1: self._buf(node.x), 2: self._buf(node.out), 3: freqs}, lambda t, r: (
            [t, node.n_heads, node.head_dim, node.n_rot, 1 if node.mode == "neox" else 0, f32_bits(node.mscale)],
            spread(-(-t * node.n_heads * half // 64), limit)))

    def _columns(self, node: G.Columns) -> None:
        in_width = self.values[node.x].width
        if node.start < 0 or node.start + node.width > in_width:
            raise BackendError(f"columns {node.start}:{node.start + node.width} of {node.x} outside its {in_width}")
        self._add_step("columns", {1: self._buf(node.x), 2: self._buf(node.out)}, lambda t, r: (
            [self._rows(node.x, t, r), in_width, node.start, node.width],
            spread(-(-self._rows(node.x, t, r) * node.width // 64), self.device.max_groups)))

    def _input(self, node: G.Input) -> None:
        """No dispatch: __call__ writes the value into its host-visible buffer."""

    def _export(self, node: G.Export) -> None:
        """No dispatch: __call__ reads the value's host-visible buffer after the pass."""

    def _layer(self, layer: int) -> Buffer:
        return self.store.layers[layer]

    def _kv_write(self, node: G.KvWrite) -> None:
        s = self.store
        limit = self.device.max_groups
        self._add_step(f"kv_write_{s.kernel_suffix}", {1: self._buf(node.k), 2: self._buf(node.v),
                                                        3: self._layer(node.layer)},
                       lambda t, r: ([t, s.k_width, s.v_width, s.spec.page_size],
                                     spread(-(-t * (s.k_width + s.v_width) // 64), limit)))

    def _attention(self, node: G.Attention) -> None:
        if node.value_dim > 256 or node.key_dim > 256 or node.n_heads % node.n_kv_heads:
            raise BackendError("vulkan attention needs head sizes <= 256 and heads divisible by kv heads")
        s = self.store
        self._add_step(f"attention_{s.kernel_suffix}", {1: self._buf(node.q), 2: self._buf(node.out),
                                                         3: self._layer(node.layer)},
                       lambda t, r: ([node.n_heads, node.n_kv_heads, node.key_dim, node.value_dim,
                                      f32_bits(node.scale), f32_bits(node.softcap), node.window, s.spec.page_size],
                                     (t, node.n_heads, 1)))

    def _select_rows(self, node: G.SelectRows) -> None:
        width = self.values[node.x].width
        self._add_step("select_rows", {1: self._buf(node.x), 2: self._buf(node.out)},
                       lambda t, r: ([r, width], spread(-(-r * width // 64), self.device.max_groups)))

    # ---- run ---------------------------------------------------------------------------------

    def _record(self, t: int, r: int) -> Any:
        started = time.perf_counter()
        cb = self.device.command_buffer()
        self.device.begin(cb)
        # A barrier only where a dispatch reads or overwrites what an earlier one since the last
        # barrier wrote (or overwrites what it read): independent dispatches such as the q, k and v
        # projections may run together on a GPU.
        written: set[int] = set()
        read: set[int] = set()
        self.barriers = 0
        for step in self.steps:
            if step.reads & written or step.writes & (written | read):
                self.device.barrier(cb)
                self.barriers += 1
                written.clear()
                read.clear()
            push, groups = step.shape(t, r)
            self.device.dispatch(cb, step.kernel, step.dset, push + [0] * (15 - len(push)) + [self.tmax], groups)
            written |= step.writes
            read |= step.reads
        self.device.barrier(cb)  # the host reads the logits
        self.device.end(cb)
        self.encode_seconds += time.perf_counter() - started
        return cb

    def _commands_for(self, t: int, r: int) -> Any:
        key = (t, r)
        cb = self._commands.get(key)
        if cb is None:
            cb = self._record(t, r)
            self._commands[key] = cb
            while len(self._commands) > CACHED_SHAPES:
                _, old = self._commands.popitem(last=False)
                self.device.free_command_buffer(old)
        else:
            self._commands.move_to_end(key)
        return cb

    def _write_meta(self, batch: Batch) -> None:
        started = time.perf_counter()
        t, tmax, ps = batch.n_tokens, self.tmax, self.store.spec.page_size
        n_seqs = len(batch.page_tables)
        tables = []
        offsets = np.zeros(n_seqs, np.int32)
        at = 0
        for s, table in enumerate(batch.page_tables):
            need = -(-int(batch.kv_lens[s]) // ps)
            tables.append(np.asarray(table[:need], np.int32))
            offsets[s] = at
            at += need
        if 6 * tmax + at > self.meta_capacity:
            self._grow_meta(6 * tmax + at)
        if n_seqs > tmax:
            raise BackendError(f"{n_seqs} sequences in one pass exceed {tmax}")
        meta = np.zeros(6 * tmax + at, np.int32)
        meta[0:t] = batch.tokens
        meta[tmax:tmax + t] = batch.positions
        meta[2 * tmax:2 * tmax + t] = batch.seq_index
        meta[3 * tmax:3 * tmax + len(batch.logit_rows)] = batch.logit_rows
        meta[4 * tmax:4 * tmax + n_seqs] = batch.kv_lens
        meta[5 * tmax:5 * tmax + n_seqs] = offsets
        if tables:
            meta[6 * tmax:] = np.concatenate(tables)
        self.meta.write(meta)
        self.encode_seconds += time.perf_counter() - started

    def _grow_meta(self, words: int) -> None:
        """A larger metadata buffer (long page tables): rebind it and re-record on next use."""
        self.meta_capacity = max(words, 2 * self.meta_capacity)
        old = self.meta
        self.meta = Buffer(self.device, 4 * self.meta_capacity, host_visible=True)
        for dset in {id(step.dset): step.dset for step in self.steps}.values():
            self.device.rebind(dset, 7, self.meta)
        for cb in self._commands.values():
            self.device.free_command_buffer(cb)
        self._commands.clear()
        old.release()

    def __call__(self, batch: Batch) -> np.ndarray:
        t, r = batch.n_tokens, len(batch.logit_rows)
        if not 1 <= t <= self.tmax:
            raise BackendError(f"a pass of {t} tokens is outside 1..{self.tmax} (max_tokens_per_pass)")
        if r > self.tmax:
            raise BackendError(f"{r} logit rows exceed {self.tmax}")
        self._write_meta(batch)
        self._write_inputs(batch)
        cb = self._commands_for(t, r)
        started = time.perf_counter()
        self.device.submit(cb)
        self.execute_seconds += time.perf_counter() - started
        self.passes += 1
        self.tokens += t
        for name in self.exports:
            batch.outputs[name] = self._read(name, t, r)
        # Like the reference, return what the output value holds: the logit rows once the graph
        # has selected them (every model graph does), all rows of a graph that does not.
        return self._read(self.graph.output, t, r)

    def _write_inputs(self, batch: Batch) -> None:
        for name in self.inputs:
            value = self.values[name]
            data = np.ascontiguousarray(batch.inputs[name], np.float32)
            if data.ndim != 2 or data.shape[1] != value.width or data.shape[0] > self.tmax:
                raise BackendError(f"input {name!r} is {data.shape}, not [<= {self.tmax}, {value.width}]")
            value.buffer.write(data)

    def _read(self, name: str, t: int, r: int) -> np.ndarray:
        value = self.values[name]
        rows = t if value.per_token else r
        data = value.buffer.read(0, rows * value.width * 4)
        return np.frombuffer(data, np.float32).reshape(rows, value.width).copy()

    @property
    def dispatches(self) -> int:
        return len(self.steps)

    def release(self) -> None:
        for cb in self._commands.values():
            self.device.free_command_buffer(cb)
        self._commands.clear()
        for buf in self.buffers:
            buf.release()
        if self.meta is not None:
            self.meta.release()
