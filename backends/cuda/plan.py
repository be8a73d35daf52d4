"""From an op graph to CUDA launches, decided once per model: no per-token Python decisions.

`build_plan` walks the graph once: it checks each op against what the kernels handle, gives every
value a width and a row space (the pass's tokens, or the rows whose logits are wanted), and
assigns values to reusable activation buffers by liveness. `Plan.launches(n_tokens, n_rows)` then
turns each step into a `Launch`: kernel name, grid, block and typed arguments that name buffers,
weights and the staged batch arrays symbolically. The executor binds those names to device arrays
once per shape and caches the result, so the device-free parts here are unit-tested with NumPy.
"""
from __future__ import annotations

from typing import Any, Union

import attrs

from llamay_core.backend_api import KvSpec
from llamay_core.errors import BackendError
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.cuda import formats

# Passes with at most this many rows use the warp-per-row matvec; wider ones the tensor-core tiles.
MATVEC_MAX_ROWS = 8
MATVEC_ROWS_PER_BLOCK = 4
TILE = 64  # matmul_tiled.cu: TILE_T = TILE_N
ELEMENT_BLOCK = 256
ATTENTION_MAX_DIM = 256  # paged_attention.cu: ATTN_MAX_DIM
ATTENTION_THREADS = 128

TOKENS, ROWS = "tokens", "rows"  # the two row spaces: every token of the pass, or logit rows only


# Typed kernel arguments; `ptx` is the PTX parameter type each must meet (checked in the tests).
@attrs.frozen
class Buf:
    """An activation buffer (float32), by buffer index."""
    index: int
    ptx = "u64"


@attrs.frozen
class Weight:
    """A weight tensor's device data; `name` None is a null pointer (no bias, no norm weight)."""
    name: str | None
    ptx = "u64"


@attrs.frozen
class Staged:
    """A staged batch array: tokens, positions, seq_index, page_tables, kv_lens, logit_rows."""
    name: str
    ptx = "u64"


@attrs.frozen
class Pages:
    """The KV page store."""
    ptx = "u64"


@attrs.frozen
class I32:
    value: int
    ptx = "u32"


@attrs.frozen
class I64:
    value: int
    ptx = "u64"


@attrs.frozen
class F32:
    value: float
    ptx = "f32"


Arg = Union[Buf, Weight, Staged, Pages, I32, I64, F32]
STAGED_NAMES = ("tokens", "positions", "seq_index", "page_tables", "kv_lens", "logit_rows")


@attrs.frozen
class Launch:
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Arg, ...]
    writes: tuple[int, int] | None = None  # (buffer index, elements written): checked against capacity


@attrs.frozen
class Step:
    node: Any
    inputs: tuple[int, ...]  # buffer indices of the node's activation inputs
    output: int | None  # buffer index of its output
    rows: str  # TOKENS or ROWS
    width: int  # output width


@attrs.frozen
class BufferSpec:
    rows: str
    width: int  # the widest value assigned to it


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def value_width(node: Any, widths: dict[str, int], shapes: dict[str, tuple[int, ...]]) -> int:
    if isinstance(node, G.Embed):
        return shapes[node.weight][1]
    if isinstance(node, G.MatMul):
        return shapes[node.weight][0]
    if isinstance(node, G.Attention):
        return node.n_heads * node.value_dim
    if isinstance(node, (G.Add, G.Mul)):
        return widths[node.a]
    if isinstance(node, (G.SiluMul, G.GeluMul)):
        return widths[node.gate]
    return widths[node.x]


def check_node(node: Any, widths: dict[str, int], shapes: dict[str, tuple[int, ...]],
               types: dict[str, str], spec: KvSpec) -> None:
    """One-line BackendError for anything the kernels do not handle."""
    if isinstance(node, (G.Embed, G.MatMul)):
        if types[node.weight] not in formats.WEIGHT_TYPES:
            raise BackendError(f"cuda: {node.weight} is {types[node.weight]}, which the kernels do not read")
        if isinstance(node, G.MatMul) and widths[node.x] != shapes[node.weight][1]:
            raise BackendError(f"cuda: {node.out} multiplies width {widths[node.x]} by {node.weight} {list(shapes[node.weight])}")
        if isinstance(node, G.MatMul) and shapes[node.weight][1] % formats.GROUP:
            raise BackendError(f"cuda: {node.out} sums over {shapes[node.weight][1]} values; the matmul kernels "
                               f"step through K in groups of {formats.GROUP}")
    if isinstance(node, G.RmsNorm) and node.group and widths[node.x] % node.group:
        raise BackendError(f"cuda: rms_norm group {node.group} does not divide width {widths[node.x]}")
    if isinstance(node, G.Rope):
        if node.mode not in ("normal", "neox") or node.n_rot % 2 or node.n_rot > node.head_dim:
            raise BackendError(f"cuda: rope mode {node.mode!r} with n_rot {node.n_rot} of head {node.head_dim}")
    if isinstance(node, G.KvWrite):
        kw, vw = spec.n_kv_heads * spec.key_dim, spec.n_kv_heads * spec.value_dim
        if (widths[node.k], widths[node.v]) != (kw, vw):
            raise BackendError(f"cuda: layer {node.layer} K/V widths {widths[node.k]}/{widths[node.v]} "
                               f"do not match the KV spec's {kw}/{vw}")
    if isinstance(node, G.Attention):
        if max(node.key_dim, node.value_dim) > ATTENTION_MAX_DIM:
            raise BackendError(f"cuda: attention head size {max(node.key_dim, node.value_dim)} exceeds {ATTENTION_MAX_DIM}")
        if node.n_heads % node.n_kv_heads:
            raise BackendError(f"cuda: {node.n_heads} heads do not group over {node.n_kv_heads} KV heads")
        if (node.n_kv_heads, node.key_dim, node.value_dim) != (spec.n_kv_heads, spec.key_dim, spec.value_dim):
            raise BackendError("cuda: attention heads do not match the KV spec")


@attrs.frozen
class Plan:
    steps: tuple[Step, ...]
    buffers: tuple[BufferSpec, ...]
    output: int  # buffer holding the logits [n_rows, n_vocab]
    n_vocab: int  # the output value's width, which is what the executor copies back per row
    spec: KvSpec
    shapes: dict[str, tuple[int, ...]] = attrs.field(eq=False)
    types: dict[str, str] = attrs.field(eq=False)
    row_bytes: dict[str, int] = attrs.field(eq=False)

    def buffer_elements(self, max_tokens: int) -> list[int]:
        """Elements to allocate per buffer when a pass has at most `max_tokens` tokens."""
        return [max_tokens * b.width for b in self.buffers]

    def launches(self, n_tokens: int, n_rows: int, tiled: bool = True) -> list[Launch]:
        """Every kernel launch of one pass with `n_tokens` tokens and `n_rows` logit rows, in order.

        `tiled` False keeps every matmul on the matvec kernel (when the tensor-core module cannot
        be compiled here).
        """
        out: list[Launch] = []
        for step in self.steps:
            out.extend(self._launch(step, n_tokens if step.rows == TOKENS else n_rows, tiled))
        return out

    def _launch(self, step: Step, rows: int, tiled: bool) -> list[Launch]:
        n = step.node
        kv = formats.KV_SUFFIX[self.spec.dtype]
        layout = (I32(self.spec.page_size), I32(self.spec.n_layers))
        tables = (Staged("positions"), Staged("seq_index"), Staged("page_tables"), I32(self.spec.max_pages))
        elements = rows * step.width
        element_grid = (ceil_div(elements, ELEMENT_BLOCK),)
        writes = (step.output, elements) if step.output is not None else None
        if isinstance(n, G.Embed):
            return [Launch(f"embed_{formats.KERNEL_SUFFIX[self.types[n.weight]]}", (rows,), (128,),
                           (Weight(n.weight), I64(self.row_bytes[n.weight]), Staged("tokens"), I32(step.width),
                            F32(n.scale), Buf(step.output)), writes)]
        if isinstance(n, G.RmsNorm):
            group = n.group or step.width
            return [Launch("rms_norm", (step.width // group, rows), (256,),
                           (Buf(step.inputs[0]), Weight(n.weight), Buf(step.output), I32(step.width), I32(group),
                            F32(n.eps), F32(n.weight_offset)), writes)]
        if isinstance(n, G.MatMul):
            suffix = formats.KERNEL_SUFFIX[self.types[n.weight]]
            k = self.shapes[n.weight][1]
            head = (Weight(n.weight), I64(self.row_bytes[n.weight]), Buf(step.inputs[0]), I32(k), Weight(n.bias),
                    Buf(step.output))
            if not tiled or rows <= MATVEC_MAX_ROWS or k % formats.TILE_K:
                return [Launch(f"matvec_{suffix}", (ceil_div(step.width, MATVEC_ROWS_PER_BLOCK), rows),
                               (32, MATVEC_ROWS_PER_BLOCK), head + (I32(step.width),), writes)]
            return [Launch(f"matmul_tiled_{suffix}", (ceil_div(step.width, TILE), ceil_div(rows, TILE)), (128,),
                           head + (I32(rows), I32(step.width)), writes)]
        if isinstance(n, (G.Add, G.Mul, G.SiluMul, G.GeluMul)):
            return [Launch(n.name, element_grid, (ELEMENT_BLOCK,),
                           (Buf(step.inputs[0]), Buf(step.inputs[1]), Buf(step.output), I64(elements)), writes)]
        if isinstance(n, (G.Scale, G.Softcap)):
            factor = n.factor if isinstance(n, G.Scale) else n.cap
            return [Launch(n.name, element_grid, (ELEMENT_BLOCK,),
                           (Buf(step.inputs[0]), Buf(step.output), I64(elements), F32(factor)), writes)]
        if isinstance(n, G.Rope):
            return [Launch("rope", element_grid, (ELEMENT_BLOCK,),
                           (Buf(step.inputs[0]), Buf(step.output), Staged("positions"), I32(rows), I32(n.n_heads),
                            I32(n.head_dim), I32(n.n_rot), I32(int(n.mode == "neox")), F32(n.base),
                            F32(n.freq_scale)), writes)]
        if isinstance(n, G.KvWrite):
            kw, vw = self.spec.n_kv_heads * self.spec.key_dim, self.spec.n_kv_heads * self.spec.value_dim
            return [Launch(f"kv_write_{kv}", (rows,), (256,),
                           (Buf(step.inputs[0]), Buf(step.inputs[1]), Pages()) + tables
                           + (I32(n.layer), I32(kw), I32(vw)) + layout)]
        if isinstance(n, G.Attention):
            return [Launch(f"attention_{kv}", (n.n_heads, rows), (ATTENTION_THREADS,),
                           (Buf(step.inputs[0]), Pages()) + tables
                           + (Staged("kv_lens"), Buf(step.output), I32(n.layer), I32(n.n_heads), I32(n.n_kv_heads),
                              I32(n.key_dim), I32(n.value_dim)) + layout
                           + (F32(n.scale), F32(n.softcap), I32(n.window)), writes)]
        if isinstance(n, G.SelectRows):
            return [Launch("select_rows", element_grid, (ELEMENT_BLOCK,),
                           (Buf(step.inputs[0]), Staged("logit_rows"), Buf(step.output), I32(step.width), I32(rows)),
                           writes)]
        raise BackendError(f"cuda: no kernel for op {n.name!r}")


def build_plan(graph: Graph, shapes: dict[str, tuple[int, ...]], types: dict[str, str], spec: KvSpec) -> Plan:
    """Check the graph, size its values and assign them to buffers that are reused once dead."""
    widths: dict[str, int] = {}
    space: dict[str, str] = {}
    for node in graph.nodes:
        check_node(node, widths, shapes, types, spec)
        for name in node.inputs():
            if name not in widths:
                raise BackendError(f"cuda: {node.name} reads {name!r} before anything writes it")
        if isinstance(node, G.KvWrite):
            if space[node.k] != TOKENS:
                raise BackendError("cuda: kv_write after select_rows has no positions to write at")
            continue
        widths[node.out] = value_width(node, widths, shapes)
        ins = node.inputs()
        space[node.out] = ROWS if isinstance(node, G.SelectRows) or (ins and space[ins[0]] == ROWS) else TOKENS
        if isinstance(node, (G.Rope, G.Attention)) and space[node.out] == ROWS:
            raise BackendError(f"cuda: {node.name} after select_rows has no positions")
    if graph.output not in widths:
        raise BackendError(f"cuda: the graph never computes its output {graph.output!r}")

    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs():
            last_use[name] = i
    last_use[graph.output] = len(graph.nodes)

    buffers: list[BufferSpec] = []
    free: list[int] = []
    where: dict[str, int] = {}
    steps: list[Step] = []
    for i, node in enumerate(graph.nodes):
        ins = tuple(where[name] for name in node.inputs())
        out = None
        if not isinstance(node, G.KvWrite):
            # Outputs never share a buffer with this node's inputs: matmul, rope and select_rows read
            # other elements than the one they write, so in-place would race.
            out = take_buffer(buffers, free, space[node.out], widths[node.out])
            where[node.out] = out
        for name in set(node.inputs()):
            if last_use[name] == i:
                free.append(where[name])
        steps.append(Step(node, ins, out, space.get(next(iter(node.outputs()), None), TOKENS),
                          widths.get(next(iter(node.outputs()), None), 0)))
    row_bytes = {name: formats.row_bytes(types[name], shape[1]) for name, shape in shapes.items() if len(shape) == 2
                 and types[name] in formats.WEIGHT_TYPES}
    # The output's own width, not graph.n_vocab: a graph whose output is not the logits (an op
    # case, a hidden state) copies back what it computed.
    return Plan(tuple(steps), tuple(buffers), where[graph.output], widths[graph.output], spec, dict(shapes),
                dict(types), row_bytes)


def take_buffer(buffers: list[BufferSpec], free: list[int], rows: str, width: int) -> int:
    """A free buffer of the same row space (widened if needed), or a new one."""
    for index in free:
        if buffers[index].rows == rows:
            free.remove(index)
            if buffers[index].width < width:
                buffers[index] = BufferSpec(rows, width)
            return index
    buffers.append(BufferSpec(rows, width))
    return len(buffers) - 1
