"""Compiling a graph into a plan: value widths, activation buffers reused by liveness, and the
list of dispatches (pipeline, bind group, workgroup counts) that one pass records."""
from __future__ import annotations

from typing import Any, Callable

import attrs
import numpy as np

from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_backends.webgpu.weights import WebGPUWeights

TOKENS, LOGIT_ROWS = 0, 1  # how many rows a value has in a pass: word 0 or word 1 of the pass table
ELEMENTWISE = {"add": 0, "mul": 1, "scale": 2, "silu_mul": 3, "gelu_mul": 4, "softcap": 5, "select_rows": 6}


@attrs.frozen
class ValueShape:
    width: int
    rows: int  # TOKENS or LOGIT_ROWS


def infer_shapes(graph: Graph, weights: WebGPUWeights) -> dict[str, ValueShape]:
    """Widths of every value, from the weights' shapes and the ops' own attributes."""
    shapes: dict[str, ValueShape] = {}
    for node in graph.nodes:
        if isinstance(node, G.Embed):
            shapes[node.out] = ValueShape(weights.matrices[node.weight].shape[1], TOKENS)
        elif isinstance(node, G.MatMul):
            shapes[node.out] = ValueShape(weights.matrices[node.weight].shape[0], shapes[node.x].rows)
        elif isinstance(node, G.Attention):
            shapes[node.out] = ValueShape(node.n_heads * node.value_dim, TOKENS)
        elif isinstance(node, G.SelectRows):
            shapes[node.out] = ValueShape(shapes[node.x].width, LOGIT_ROWS)
        elif isinstance(node, (G.SiluMul, G.GeluMul)):
            shapes[node.out] = shapes[node.gate]
        elif isinstance(node, (G.Add, G.Mul)):
            shapes[node.out] = shapes[node.a]
        elif isinstance(node, G.Columns):
            shapes[node.out] = ValueShape(node.width, shapes[node.x].rows)
        elif isinstance(node, G.Input):  # as on cpu, a handed-in value has a row per token of the pass
            shapes[node.out] = ValueShape(node.width, TOKENS)
        elif not isinstance(node, (G.KvWrite, G.Export)):
            shapes[node.out] = shapes[node.x]
    return shapes


def last_uses(graph: Graph) -> dict[str, int]:
    """Index of each value's last reader; the output and exported values live to the end of the
    pass (they are copied out after it)."""
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs():
            last[name] = len(graph.nodes) if isinstance(node, G.Export) else i
    last[graph.output] = len(graph.nodes)
    return last


class ActivationPool:
    """Storage buffers for values, reused once a value's last reader has run.

    A node's output is allocated before its inputs are released, so a dispatch never binds one
    buffer for reading and writing at once (WebGPU forbids it).
    """

    def __init__(self, gpu: Any) -> None:
        self.gpu = gpu
        self.free: list[Any] = []
        self.total_bytes = 0

    def take(self, size: int, fresh: bool = False) -> Any:
        """A buffer of at least `size` bytes; `fresh`: never a reused one (the host writes it
        before the pass, while a reused one may still be read or written earlier in the pass)."""
        fits = [b for b in self.free if b.size >= size] if not fresh else []
        if fits:
            buf = min(fits, key=lambda b: b.size)
            self.free.remove(buf)
            return buf
        usage = self.gpu.wgpu.BufferUsage
        self.total_bytes += size
        return self.gpu.device.create_buffer(size=size, usage=usage.STORAGE | usage.COPY_SRC | usage.COPY_DST)

    def give(self, buf: Any) -> None:
        self.free.append(buf)


Grid = Callable[[int, int], tuple[int, int, int]]


@attrs.define
class Dispatch:
    """One dispatch of a pass. `bindings` maps binding index to a buffer ("pass" and "params" are
    resolved when bind groups are built, so they can be rebuilt when the pass table grows)."""

    kernel: str
    pipeline: Any
    bindings: dict[int, Any]
    params_offset: int
    params_size: int
    grid: Grid
    bind_group: Any = None


def linear_grid(width: int, kind: int, per_group: int = 256) -> Grid:
    """Workgroups covering rows * width elements, folded into 2-D past the 65535 limit."""
    def grid(t: int, r: int) -> tuple[int, int, int]:
        n = -(-((t, r)[kind] * width) // per_group)
        x = min(n, 65535)
        return x, -(-n // x), 1
    return grid


def pack_params(*fields: float | int) -> bytes:
    """A params struct: u32 for ints, f32 for floats, padded to 16 bytes."""
    words = np.zeros(-(-len(fields) // 4) * 4, np.uint32)
    for i, v in enumerate(fields):
        words[i] = np.float32(v).view(np.uint32) if isinstance(v, float) else np.uint32(v)
    return words.tobytes()
