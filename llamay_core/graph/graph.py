"""A Graph: an ordered list of ops from token ids to logits, and a small builder for families."""
from __future__ import annotations

from typing import Any, Iterator

import attrs

from llamay_core.graph import ops


@attrs.frozen
class Graph:
    """Ops in execution order. The value named by `output` holds the logits."""

    nodes: tuple[ops.Op, ...]
    output: str
    n_vocab: int

    def __iter__(self) -> Iterator[ops.Op]:
        """The ops in execution order (the same as iterating `nodes`)."""
        return iter(self.nodes)

    def op_names(self) -> frozenset[str]:
        return frozenset(n.name for n in self.nodes)

    def weight_names(self) -> list[str]:
        """GGUF tensor names the graph reads, in first-use order."""
        names: list[str] = []
        for n in self.nodes:
            names.extend(w for w in n.weights() if w not in names)
        return names


class GraphBuilder:
    """Appends ops and names their outputs, so family code reads like the model's math."""

    def __init__(self) -> None:
        self._nodes: list[Any] = []
        self._counter = 0

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}.{self._counter}"

    def add_node(self, node: ops.Op) -> str | None:
        """Append `node`; return the value it writes (None for ops that write none)."""
        self._nodes.append(node)
        outs = node.outputs()
        return outs[0] if outs else None

    def embed(self, weight: str, scale: float = 1.0) -> str:
        return self.add_node(ops.Embed(self._fresh("x"), weight, scale))

    def rms_norm(self, x: str, weight: str | None, eps: float, group: int = 0,
                 weight_offset: float = 0.0) -> str:
        return self.add_node(ops.RmsNorm(self._fresh("norm"), x, weight, eps, group, weight_offset))

    def matmul(self, x: str, weight: str, bias: str | None = None) -> str:
        return self.add_node(ops.MatMul(self._fresh("mm"), x, weight, bias))

    def add(self, a: str, b: str) -> str:
        return self.add_node(ops.Add(self._fresh("add"), a, b))

    def mul(self, a: str, b: str) -> str:
        return self.add_node(ops.Mul(self._fresh("mul"), a, b))

    def scale(self, x: str, factor: float) -> str:
        return self.add_node(ops.Scale(self._fresh("scale"), x, factor))

    def rope(self, x: str, **kw: Any) -> str:
        return self.add_node(ops.Rope(self._fresh("rope"), x, **kw))

    def kv_write(self, layer: int, k: str, v: str) -> None:
        self.add_node(ops.KvWrite(layer, k, v))

    def attention(self, q: str, layer: int, **kw: Any) -> str:
        return self.add_node(ops.Attention(self._fresh("attn"), q, layer, **kw))

    def silu_mul(self, gate: str, up: str) -> str:
        return self.add_node(ops.SiluMul(self._fresh("swiglu"), gate, up))

    def gelu_mul(self, gate: str, up: str) -> str:
        return self.add_node(ops.GeluMul(self._fresh("geglu"), gate, up))

    def softcap(self, x: str, cap: float) -> str:
        return self.add_node(ops.Softcap(self._fresh("softcap"), x, cap))

    def rope_table(self, x: str, **kw: Any) -> str:
        return self.add_node(ops.RopeTable(self._fresh("rope"), x, **kw))

    def columns(self, x: str, start: int, width: int) -> str:
        return self.add_node(ops.Columns(self._fresh("cols"), x, start, width))

    def moe(self, x: str, **kw: Any) -> str:
        return self.add_node(ops.Moe(self._fresh("moe"), x, **kw))

    def select_rows(self, x: str) -> str:
        return self.add_node(ops.SelectRows(self._fresh("rows"), x))

    def finish(self, output: str, n_vocab: int) -> Graph:
        return Graph(nodes=tuple(self._nodes), output=output, n_vocab=n_vocab)
