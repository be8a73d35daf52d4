"""Running one graph on two backends: the ops a backend lacks run on a fallback backend.

Like ggml's scheduler, the graph is cut into segments of consecutive nodes that run on the same
backend. A segment's graph starts with an `input` op for every value an earlier segment made
and ends with an `export` op for every value a later segment reads; the split executable moves
those activations between the two backends as host arrays through `Batch.inputs` / `Batch.outputs`.

The KV cache lives on one backend: `kv_write` and `attention` always run on the backend that
owns the page store (the primary when it has both ops, otherwise the fallback), so pages never
move and snapshot/fork keep working through that store's PageStore methods.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs
import numpy as np

from llamay_core.backend_api import Batch, KvSpec
from llamay_core.errors import BackendError, one_line
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph

KV_OPS = frozenset({"kv_write", "attention"})
def value_widths(graph: Graph, tensors: Mapping[str, TensorInfo]) -> dict[str, int]:
    """Width (columns) of every value the graph computes, from the weight shapes."""
    widths: dict[str, int] = {}
    for node in graph.nodes:
        if isinstance(node, G.Embed):
            widths[node.out] = tensors[node.weight].shape[-1]
        elif isinstance(node, G.MatMul):
            widths[node.out] = tensors[node.weight].shape[0]
        elif isinstance(node, G.Attention):
            widths[node.out] = node.n_heads * node.value_dim
        elif isinstance(node, (G.Input, G.Columns)):
            widths[node.out] = node.width
        elif node.outputs():  # elementwise and normalisation ops keep their first input's width
            widths[node.outputs()[0]] = widths[node.inputs()[0]]
    return widths


@attrs.frozen
class Segment:
    """Consecutive nodes on one backend, as a graph that reads `inputs` and exports `exports`."""

    on_primary: bool
    graph: Graph
    inputs: tuple[str, ...]
    exports: tuple[str, ...]


def assign(graph: Graph, primary_ops: frozenset[str]) -> list[bool]:
    """Per node, whether it runs on the primary backend (True) or the fallback (False)."""
    kv_on_primary = KV_OPS <= primary_ops
    return [kv_on_primary if n.name in KV_OPS else n.name in primary_ops for n in graph.nodes]


def plan_split(graph: Graph, primary_ops: frozenset[str], tensors: Mapping[str, TensorInfo]) -> list[Segment]:
    """Cut the graph where the backend changes; compute what each segment hands over."""
    where = assign(graph, primary_ops)
    groups: list[tuple[bool, list[Any]]] = []
    for node, side in zip(graph.nodes, where):
        if groups and groups[-1][0] == side:
            groups[-1][1].append(node)
        else:
            groups.append((side, [node]))
    producer: dict[str, int] = {}
    for i, (_, nodes) in enumerate(groups):
        for n in nodes:
            for name in n.outputs():
                producer[name] = i
    needed_later: list[set[str]] = [set() for _ in groups]
    inputs: list[list[str]] = [[] for _ in groups]
    for i, (_, nodes) in enumerate(groups):
        for n in nodes:
            for name in n.inputs():
                src = producer.get(name)
                if src is None:
                    raise BackendError(f"graph reads {name!r} before any node computes it")
                if src != i:
                    needed_later[src].add(name)
                    if name not in inputs[i]:
                        inputs[i].append(name)
    needed_later[producer[graph.output]].add(graph.output)
    widths = value_widths(graph, tensors)
    segments = []
    for i, (side, nodes) in enumerate(groups):
        exports = tuple(name for n in nodes for name in n.outputs() if name in needed_later[i])
        body = [G.Input(name, widths[name]) for name in inputs[i]] + nodes + [G.Export(x) for x in exports]
        outs = [name for n in body for name in n.outputs()]
        output = exports[0] if exports else outs[-1]
        segments.append(Segment(side, Graph(nodes=tuple(body), output=output, n_vocab=graph.n_vocab),
                                tuple(inputs[i]), exports))
    return segments


class SplitExecutable:
    """Runs the segments in order, each on its backend, handing activations across on the host."""

    def __init__(self, graph: Graph, segments: Sequence[Segment], executables: Sequence[Callable[[Batch], Any]],
                 primary: str, fallback: str, fallback_backend: Any) -> None:
        self.graph = graph
        self.segments = list(segments)
        self.executables = list(executables)
        self.primary, self.fallback = primary, fallback
        self.fallback_backend = fallback_backend  # closed with the model (Model.close)

    def __call__(self, batch: Batch) -> np.ndarray:
        values: dict[str, np.ndarray] = {}
        for seg, run in zip(self.segments, self.executables):
            part = attrs.evolve(batch, inputs={name: values[name] for name in seg.inputs}, outputs={})
            run(part)
            for name in seg.exports:
                values[name] = np.asarray(part.outputs[name], np.float32)
        return values[self.graph.output]

    def placement(self) -> list[tuple[str, list[str]]]:
        """(backend, op names) per segment: what ran where, for reports."""
        return [(self.primary if s.on_primary else self.fallback,
                 [n.name for n in s.graph.nodes if n.name not in G.SPLIT_OP_NAMES]) for s in self.segments]


def fallback_order(primary_name: str) -> list[str]:
    """Registered backends other than the primary, highest priority first: fallback candidates."""
    from llamay_core.plugins_runtime.manager import get_registry

    infos = sorted(get_registry().backends.values(), key=lambda b: (-b.priority, b.name))
    return [info.name for info in infos if info.name != primary_name]


def choose_fallback(primary_name: str, needed_ops: frozenset[str], create: Callable[[str], Any]) -> tuple[str, Any]:
    """The first host backend (`Capabilities.device_kind`) by priority that is available and runs
    every op the primary lacks. Activations cross on the host, so a host backend costs no copies."""
    reasons = []
    for name in fallback_order(primary_name):
        try:
            backend = create(name)
        except Exception as exc:  # an unavailable or broken candidate: try the next one
            reasons.append(f"{name}: {one_line(exc)}")
            continue
        caps = backend.capabilities
        lacking = (needed_ops | G.SPLIT_OP_NAMES) - set(caps.ops)
        if caps.device_kind == "host" and not lacking:
            return name, backend
        reasons.append(f"{name}: " + (f"lacks {', '.join(sorted(lacking))}" if lacking else "not a host backend"))
        backend.close()
    raise BackendError(f"no fallback backend for the ops {primary_name!r} lacks ({'; '.join(reasons)})")


def compile_split(graph: Graph, tensors: Mapping[str, TensorInfo], kv_spec: KvSpec, primary_name: str,
                  primary: Any, create: Callable[[str], Any]) -> tuple[Any, SplitExecutable]:
    """Compile `graph` across `primary` and a fallback; returns (the KV page store, executable).

    `create(name)` makes a ready backend by name (the loader's `create_backend`).
    """
    primary_ops = frozenset(primary.capabilities.ops)
    lacking_split = G.SPLIT_OP_NAMES - primary_ops
    missing = graph.op_names() - primary_ops
    if lacking_split:
        raise BackendError(f"backend {primary_name!r} lacks ops {', '.join(sorted(missing))} and cannot share "
                           f"a graph with a fallback (it lacks {', '.join(sorted(lacking_split))})")
    segments = plan_split(graph, primary_ops, tensors)
    fallback_needed = frozenset(n.name for s in segments if not s.on_primary for n in s.graph.nodes) - G.SPLIT_OP_NAMES
    fallback_name, fallback = choose_fallback(primary_name, fallback_needed, create)
    kv_on_primary = KV_OPS <= primary_ops
    owner = primary if kv_on_primary else fallback
    if kv_spec.dtype not in owner.capabilities.kv_dtypes:
        raise BackendError(f"backend {primary_name if kv_on_primary else fallback_name!r} holds the KV cache "
                           f"but does not store it as {kv_spec.dtype}")
    store = owner.kv_store(kv_spec)
    # The backend without the KV ops still needs a store to compile against: one page is enough.
    other_store = (fallback if kv_on_primary else primary).kv_store(attrs.evolve(kv_spec, max_pages=1))
    executables: list[Any] = [None] * len(segments)
    for on_primary in (True, False):
        backend = primary if on_primary else fallback
        mine = [i for i, s in enumerate(segments) if s.on_primary == on_primary]
        names = sorted({w for i in mine for w in segments[i].graph.weight_names()})
        weights = backend.load_weights({n: tensors[n] for n in names})
        seg_store = store if on_primary == kv_on_primary else other_store
        for i in mine:
            executables[i] = backend.compile(segments[i].graph, weights, seg_store)
    return store, SplitExecutable(graph, segments, executables, primary_name, fallback_name, fallback)
