"""The op grid: one case per (op, weight type, shape), each a tiny graph with seeded inputs.

A case's graph reads its activations through `embed` ops over random F32 tables (the only way
the backend contract lets a caller inject values), applies the op under test and ends with
`select_rows`, so the executable returns the op's output for the rows the batch asks for.
Every table holds the real rows followed by as many NaN rows: a "poison" pass that indexes the
NaN rows runs first, so any output element the backend leaves unwritten on the real pass still
holds NaN from its previous use of that buffer and fails.

Attention cases (which also cover kv_write) run for every KV dtype the backend stores; their
"type" is the KV dtype (``kv-f32``, ``kv-f16``, ``kv-vq8``). They reach every page-table edge:
a context of exactly k pages, a pass crossing a page boundary, a last page of one slot, 10+
pages, page tables out of order, pages shared by two sequences after a fork, and several
sequences of different lengths in one pass; hypothesis draws more layouts (`shapes.py`).

"solo" cases run a batch of 16 rows of very different sizes, then one of those rows alone: a
row's result must not depend on the rest of the batch beyond the op's limit.

A case id, ``op/type/shape/sSEED``, is enough to rebuild the case exactly (`find_case`).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import attrs
import numpy as np

from llamay_core.backend_api import Batch, KvSpec
from llamay_core.errors import UsageError
from llamay_core.files.gguf_file import TensorInfo
from llamay_core.graph import ops as G
from llamay_core.graph.graph import Graph
from llamay_conformance.shapes import drawn_layouts
from llamay_conformance.weights import GRID_TYPES, F16_FIELDS, block_size, f32_tensor, random_tensor

PAGE_SIZE = 16
KV_TYPES = ("f32", "f16", "vq8")  # as llamay_core.backend_api.KV_DTYPES; a case's type is "kv-" + dtype
SOLO_ROWS = 16
FAMILY_OPS = frozenset(G.EXTENDED_OP_NAMES)  # built by cases_family.py


@attrs.frozen
class OpCase:
    """What to build: the op, the weight type under test ("-" for none), a shape label, a seed."""

    op: str
    type_name: str
    shape: str
    params: tuple[tuple[str, Any], ...]
    seed: int = 0

    @property
    def id(self) -> str:
        return f"{self.op}/{self.type_name}/{self.shape}/s{self.seed}"

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    @property
    def kv_dtype(self) -> str:
        """The KV dtype an attention case stores its pages in (f32 for every other op)."""
        return self.type_name[3:] if self.type_name.startswith("kv-") else "f32"


@attrs.define
class Pass:
    """One executable call: the batch, and the same batch pointed at the NaN rows."""

    batch: Batch
    n_rows: int  # rows of real data in every input table; poison rows follow

    def poisoned(self) -> Batch:
        return attrs.evolve(self.batch, tokens=self.batch.tokens + np.int32(self.n_rows), inputs={}, outputs={})

    def real(self) -> Batch:
        return attrs.evolve(self.batch, inputs={}, outputs={})


@attrs.define
class BuiltCase:
    graph: Graph
    tensors: dict[str, TensorInfo]
    kv_spec: KvSpec
    passes: list[Pass]


def _table(name: str, rng: np.random.Generator, n: int, width: int, scale: float = 1.0,
           small_row: int | None = None) -> TensorInfo:
    """n real rows, then n NaN rows. With `small_row`, row sizes vary over three decades (as
    activations do, the first token's being huge) and that row is the smallest of all."""
    real = rng.standard_normal((n, width)) * scale
    if small_row is not None:
        sizes = 10.0 ** rng.uniform(-1, 2, n)
        sizes[small_row] = 10.0 ** -2
        real *= sizes[:, None]
    return f32_tensor(name, np.concatenate([real, np.full((n, width), np.nan)]))


def _plain_batch(rows: int, positions: Iterable[int] | None = None, logit_rows: Iterable[int] | None = None) -> Batch:
    pos = np.asarray(list(positions) if positions is not None else range(rows), np.int32)
    return Batch(tokens=np.arange(rows, dtype=np.int32), positions=pos, seq_index=np.zeros(rows, np.int32),
                 page_tables=[np.zeros(1, np.int32)], kv_lens=np.asarray([int(pos.max()) + 1], np.int32),
                 logit_rows=np.asarray(list(logit_rows) if logit_rows is not None else range(rows), np.int32))


def _tiny_kv() -> KvSpec:
    return KvSpec(n_layers=1, n_kv_heads=1, key_dim=32, value_dim=32, page_size=PAGE_SIZE, max_pages=4)


def _one_op(rng: np.random.Generator, rows: int, widths: dict[str, int], make: Callable[..., Any],
            scale: float = 1.0, extra: dict[str, TensorInfo] | None = None, positions: Iterable[int] | None = None,
            logit_rows: Iterable[int] | None = None, solo: int | None = None,
            out_width: int | None = None) -> BuiltCase:
    """embed each named input from its own table, apply `make(**values)`, select rows.

    `solo`: a second pass runs row `solo` alone (the batch-composition check); `out_width`: the
    result's width where it is not the inputs' (a matmul's output features)."""
    nodes: list[Any] = []
    tensors: dict[str, TensorInfo] = dict(extra or {})
    values = {}
    for arg, width in widths.items():
        tensors[f"in.{arg}"] = _table(f"in.{arg}", rng, rows, width, scale, small_row=solo)
        nodes.append(G.Embed(f"v.{arg}", f"in.{arg}"))
        values[arg] = f"v.{arg}"
    nodes.append(make(**values))
    nodes.append(G.SelectRows("result", nodes[-1].out))
    graph = Graph(nodes=tuple(nodes), output="result", n_vocab=out_width or max(widths.values()))
    passes = [Pass(_plain_batch(rows, positions, logit_rows), rows)]
    if solo is not None:
        alone = _plain_batch(1)
        alone.tokens = np.asarray([solo], np.int32)
        passes.append(Pass(alone, rows))
    return BuiltCase(graph, tensors, _tiny_kv(), passes)


def build(case: OpCase) -> BuiltCase:
    """The graph, tensors and passes of a case, entirely determined by the case (and its seed)."""
    if case.op in FAMILY_OPS:
        from llamay_conformance.cases_family import build_family_case

        return build_family_case(case)
    rng = np.random.default_rng([case.seed, sum(map(ord, case.id))])
    p = case.param
    if case.op in ("add", "mul"):
        cls = G.Add if case.op == "add" else G.Mul
        return _one_op(rng, p("t"), {"a": p("w"), "b": p("w")}, lambda a, b: cls("out", a, b))
    if case.op == "scale":
        return _one_op(rng, p("t"), {"x": p("w")}, lambda x: G.Scale("out", x, 0.37))
    if case.op in ("silu_mul", "gelu_mul"):
        cls = G.SiluMul if case.op == "silu_mul" else G.GeluMul
        return _one_op(rng, p("t"), {"gate": p("w"), "up": p("w")}, lambda gate, up: cls("out", gate, up), scale=3.0)
    if case.op == "softcap":
        return _one_op(rng, p("t"), {"x": p("w")}, lambda x: G.Softcap("out", x, 5.0), scale=8.0)
    if case.op == "rms_norm":
        w = p("w")
        extra = {} if p("no_weight") else {"norm.w": f32_tensor("norm.w", 1 + 0.2 * rng.standard_normal(p("group") or w))}
        weight = None if p("no_weight") else "norm.w"
        return _one_op(rng, p("t"), {"x": w}, lambda x: G.RmsNorm("out", x, weight, 1e-6, p("group") or 0,
                                                                   p("offset") or 0.0), scale=2.0, extra=extra,
                       solo=p("solo"))
    if case.op == "rope":
        t, heads, dim = p("t"), p("heads"), p("dim")
        start = p("pos")
        return _one_op(rng, t, {"x": heads * dim},
                       lambda x: G.Rope("out", x, heads, dim, p("rot") or dim, p("mode"), p("base"), p("fs") or 1.0),
                       positions=range(start, start + t))
    if case.op == "select_rows":
        return _one_op(rng, p("t"), {"x": p("w")}, lambda x: G.Scale("out", x, 1.0), logit_rows=p("rows"))
    if case.op == "matmul":
        return _matmul(case, rng)
    if case.op == "embed":
        return _embed(case, rng)
    if case.op == "attention":
        return _attention(case, rng)
    raise KeyError(f"no cases for op {case.op!r}")


def _matmul(case: OpCase, rng: np.random.Generator) -> BuiltCase:
    t, n_in, n_out = case.param("t"), case.param("in"), case.param("out")
    extra = {"w": random_tensor("w", case.type_name, (n_out, n_in), rng)}
    bias = None
    if case.param("bias"):
        extra["b"] = f32_tensor("b", rng.standard_normal(n_out))
        bias = "b"
    return _one_op(rng, t, {"x": n_in}, lambda x: G.MatMul("out", x, "w", bias), extra=extra, solo=case.param("solo"),
                   out_width=n_out)


def _embed(case: OpCase, rng: np.random.Generator) -> BuiltCase:
    """The table under test has the real rows, then the same number of rows that decode to NaN."""
    t, width = case.param("t"), case.param("w")
    table = random_tensor("table", case.type_name, (2 * t, width), rng)
    data = np.array(table.data, copy=True)
    if case.type_name in F16_FIELDS:
        per_row = width // block_size(case.type_name)
        blocks = data.reshape(2 * t * per_row, -1)
        nan16 = np.array([np.nan], np.float16).view(np.uint8)
        for offset in F16_FIELDS[case.type_name]:
            blocks[t * per_row:, offset:offset + 2] = nan16
    elif case.type_name == "BF16":
        data[t:] = 0x7FC0  # a bf16 NaN
    else:
        data[t:] = np.nan
    table = attrs.evolve(table, data=data)
    order = rng.permutation(t)
    nodes = (G.Embed("out", "table", case.param("scale") or 1.0), G.SelectRows("result", "out"))
    graph = Graph(nodes=nodes, output="result", n_vocab=width)
    batch = _plain_batch(t)
    batch.tokens = order.astype(np.int32)
    return BuiltCase(graph, {"table": table}, _tiny_kv(), [Pass(batch, t)])


def _page_tables(rng: np.random.Generator, passes: list[list[int]], fork: tuple, order: str) -> list[np.ndarray]:
    """Per sequence, its page ids: a shuffled subset of the pool, or the same in reverse order; a
    forked sequence starts with its parent's first pages (shared, as after `Context.fork`)."""
    n_seqs = len(passes[0])
    starts = [0] * n_seqs
    for child, _, at in fork:
        starts[child] = at
    lengths = [starts[s] + sum(p[s] for p in passes) for s in range(n_seqs)]
    shared = {child: (parent, at // PAGE_SIZE) for child, parent, at in fork}
    own = [-(-lengths[s] // PAGE_SIZE) - shared.get(s, (0, 0))[1] for s in range(n_seqs)]
    ids = rng.permutation(sum(own) + 3)[:sum(own)]
    if order == "reversed":
        ids = np.sort(ids)[::-1]
    tables, at_id = [], 0
    for s in range(n_seqs):
        tables.append(ids[at_id:at_id + own[s]].astype(np.int32))
        at_id += own[s]
    for child, (parent, n_shared) in shared.items():
        tables[child] = np.concatenate([tables[parent][:n_shared], tables[child]]).astype(np.int32)
    return tables


def _attention(case: OpCase, rng: np.random.Generator) -> BuiltCase:
    """Passes of one or more sequences over paged K/V, in the case's KV dtype.

    `passes`: per pass, tokens of each sequence (0: the sequence sits that pass out); `fork`:
    (child, parent, at) — the child starts at `at` tokens on its parent's first pages.
    """
    p = case.param
    heads, kv_heads, dk, dv = p("heads"), p("kv_heads"), p("dk"), p("dv")
    passes_spec = [list(x) for x in p("passes")]
    fork = p("fork") or ()
    n_seqs = len(passes_spec[0])
    tables = _page_tables(rng, passes_spec, fork, p("order") or "shuffled")
    total = sum(sum(x) for x in passes_spec)
    spec = KvSpec(n_layers=1, n_kv_heads=kv_heads, key_dim=dk, value_dim=dv, page_size=PAGE_SIZE,
                  max_pages=int(max(int(t.max()) for t in tables)) + 4, dtype=case.kv_dtype)
    qscale = p("qscale") or 1.0
    tensors = {"in.q": _table("in.q", rng, total, heads * dk, qscale), "in.k": _table("in.k", rng, total, kv_heads * dk),
               "in.v": _table("in.v", rng, total, kv_heads * dv)}
    nodes = (G.Embed("q", "in.q"), G.Embed("k", "in.k"), G.Embed("v", "in.v"), G.KvWrite(0, "k", "v"),
             G.Attention("attn", "q", 0, heads, kv_heads, dk, dv, 1.0 / np.sqrt(dk), p("softcap") or 0.0,
                         p("window") or 0),
             G.SelectRows("result", "attn"))
    graph = Graph(nodes=nodes, output="result", n_vocab=heads * dv)
    done = [0] * n_seqs
    for child, _, at in fork:
        done[child] = at
    passes, row = [], 0
    for pass_ in passes_spec:
        in_pass = [s for s, n in enumerate(pass_) if n]
        tokens, positions, seq_index = [], [], []
        for local, s in enumerate(in_pass):
            n = pass_[s]
            tokens += range(row, row + n)
            positions += range(done[s], done[s] + n)
            seq_index += [local] * n
            row += n
            done[s] += n
        batch = Batch(tokens=np.asarray(tokens, np.int32), positions=np.asarray(positions, np.int32),
                      seq_index=np.asarray(seq_index, np.int32), page_tables=[tables[s] for s in in_pass],
                      kv_lens=np.asarray([done[s] for s in in_pass], np.int32),
                      logit_rows=np.arange(len(tokens), dtype=np.int32))
        passes.append(Pass(batch, total))
    return BuiltCase(graph, tensors, spec, passes)


# One token, an odd width, and more rows than a 32-row tile.
ELEMENTWISE_SHAPES = (("t1xw64", {"t": 1, "w": 64}), ("t7xw129", {"t": 7, "w": 129}), ("t33xw256", {"t": 33, "w": 256}))


# Page-table edges, run for every KV dtype: (label, passes, extra params). No pass holds more
# than 128 tokens, the smallest max_tokens_per_pass of the first-party backends (vulkan).
PAGE_EDGES: tuple[tuple[str, tuple, dict], ...] = (
    ("one-full-page-p16", ((16,),), {}),
    ("full-pages-p32+t16", ((32,), (16,)), {}),
    ("decode-to-full-page-p31+t1", ((31,), (1,)), {}),
    ("cross-page-in-pass-p10+t12", ((10,), (12,)), {}),
    ("last-page-1-slot-p17", ((17,),), {}),
    ("last-page-1-slot-p32+t1", ((32,), (1,)), {}),
    ("11-pages-p120+t50+t1", ((120,), (50,), (1,)), {}),
    ("reversed-pages-p40+t9", ((40,), (9,)), {"order": "reversed"}),
    ("fork-at-p32+t5,7", ((32, 0), (5, 7)), {"fork": ((1, 0, 32),)}),
    ("fork-at-p16-of-20+t1,3", ((20, 0), (1, 3)), {"fork": ((1, 0, 16),)}),
    ("3seq-p5,16,33+t1,1,1", ((5, 16, 33), (1, 1, 1)), {}),
    ("3seq-p7,13,16+t7,13,16", ((7, 13, 16), (7, 13, 16)), {}),
)


def _layout_label(layout: dict) -> str:
    passes = "+".join(",".join(map(str, p)) for p in layout["passes"])
    fork = "".join(f"-fork{c}of{par}at{at}" for c, par, at in layout["fork"])
    heads = layout["kv_heads"] * layout["group"]
    return f"drawn-h{heads}kv{layout['kv_heads']}-{passes}{fork}-{layout['order']}"


def _attention_cases(kv_types: list[str], seed: int) -> list[tuple[str, str, str, dict]]:
    out = []
    for kv in kv_types:
        for label, passes, extra in PAGE_EDGES:
            out.append(("attention", f"kv-{kv}", label,
                        {"heads": 4, "kv_heads": 2, "dk": 64, "dv": 64, "passes": passes, **extra}))
    for layout in drawn_layouts(seed, PAGE_SIZE):
        out.append(("attention", f"kv-{kv_types[0]}", _layout_label(layout),
                    {"heads": layout["kv_heads"] * layout["group"], "kv_heads": layout["kv_heads"], "dk": 32,
                     "dv": 32, "passes": layout["passes"], "fork": layout["fork"], "order": layout["order"]}))
    return out


def grid(type_names: Iterable[str], seed: int = 0, kv_dtypes: Iterable[str] = ("f32",),
         ops: Iterable[str] | None = None) -> list[OpCase]:
    """Every case for a backend that reads `type_names` (intersected with GRID_TYPES) and stores
    KV as `kv_dtypes`; the hypothesis-drawn page layouts depend on `seed`.

    `ops`, the backend's declared ops: a family op (rope_table, columns, moe) is checked when the
    backend implements it or can hand it to a fallback (it has the split ops `input`/`export`);
    a backend that can do neither never runs such a model, so there is nothing to check."""
    types = [t for t in GRID_TYPES if t in set(type_names)]
    kv_types = [k for k in KV_TYPES if k in set(kv_dtypes)] or ["f32"]
    shaped: list[tuple[str, str, str, dict]] = []
    for op in ("add", "mul", "scale", "silu_mul", "gelu_mul", "softcap"):
        shaped += [(op, "-", label, prm) for label, prm in ELEMENTWISE_SHAPES]
    shaped += [
        ("rms_norm", "-", "t1xw64", {"t": 1, "w": 64}),
        ("rms_norm", "-", "t7xw576", {"t": 7, "w": 576}),
        ("rms_norm", "-", "t5xw129", {"t": 5, "w": 129}),
        ("rms_norm", "-", "t3xw256-group64", {"t": 3, "w": 256, "group": 64}),
        ("rms_norm", "-", "t3xw128-offset1", {"t": 3, "w": 128, "offset": 1.0}),
        ("rms_norm", "-", "t2xw64-noweight", {"t": 2, "w": 64, "no_weight": True}),
        ("rms_norm", "-", f"solo-row5-of-t{SOLO_ROWS}xw256", {"t": SOLO_ROWS, "w": 256, "solo": 5}),
        ("rope", "-", "normal-h3x64-p0", {"t": 7, "heads": 3, "dim": 64, "mode": "normal", "base": 10000.0, "pos": 0}),
        ("rope", "-", "neox-h3x64-p0", {"t": 7, "heads": 3, "dim": 64, "mode": "neox", "base": 10000.0, "pos": 0}),
        ("rope", "-", "normal-h2x64-p4090", {"t": 5, "heads": 2, "dim": 64, "mode": "normal", "base": 10000.0, "pos": 4090}),
        ("rope", "-", "neox-h2x128-rot64-p32760", {"t": 1, "heads": 2, "dim": 128, "rot": 64, "mode": "neox",
                                                   "base": 1000000.0, "pos": 32760}),
        ("rope", "-", "normal-h2x64-fs0.25-p100", {"t": 3, "heads": 2, "dim": 64, "mode": "normal", "base": 10000.0,
                                                   "fs": 0.25, "pos": 100}),
        ("select_rows", "-", "t7-rows0,3,6", {"t": 7, "w": 64, "rows": (0, 3, 6)}),
        ("select_rows", "-", "t7-row6", {"t": 7, "w": 64, "rows": (6,)}),
    ]
    base_attention = [
        ("h4kv4-t1", {"heads": 4, "kv_heads": 4, "dk": 64, "dv": 64, "passes": ((1,),)}),
        ("h9kv3-t7", {"heads": 9, "kv_heads": 3, "dk": 64, "dv": 64, "passes": ((7,),)}),
        ("h8kv1-p40+t3", {"heads": 8, "kv_heads": 1, "dk": 64, "dv": 64, "passes": ((40,), (3,))}),
        ("h4kv2-p20+t1-softcap", {"heads": 4, "kv_heads": 2, "dk": 32, "dv": 32, "qscale": 4.0,
                                  "softcap": 10.0, "passes": ((20,), (1,))}),
        ("h4kv2-p20+t2-window8", {"heads": 4, "kv_heads": 2, "dk": 32, "dv": 32, "window": 8,
                                  "passes": ((20,), (2,))}),
        ("h4kv2-2seq-p5,17+t1,1", {"heads": 4, "kv_heads": 2, "dk": 64, "dv": 32, "passes": ((5, 17), (1, 1))}),
    ]
    shaped += [("attention", f"kv-{kv_types[0]}", label, prm) for label, prm in base_attention]
    shaped += _attention_cases(kv_types, seed)
    for t in types:
        small = 3 * block_size(t) if block_size(t) > 1 else 96
        small = max(small, 256) if block_size(t) == 256 else small
        shaped += [
            ("embed", t, "t7xw256", {"t": 7, "w": 256}),
            ("embed", t, "t1xw256-scale24", {"t": 1, "w": 256, "scale": 24.0}),
            ("matmul", t, f"t1x{small}x32", {"t": 1, "in": small, "out": 32}),
            ("matmul", t, f"t7x{small}x67", {"t": 7, "in": small, "out": 67}),
            ("matmul", t, "t33x512x64", {"t": 33, "in": 512, "out": 64}),
            ("matmul", t, f"solo-row5-of-t{SOLO_ROWS}x256x32", {"t": SOLO_ROWS, "in": 256, "out": 32, "solo": 5}),
        ]
        if t == "F32":
            shaped.append(("matmul", t, "t7x64x48-bias", {"t": 7, "in": 64, "out": 48, "bias": True}))
    from llamay_conformance.cases_family import family_cases

    family = family_cases(types, seed)
    if ops is not None and not G.SPLIT_OP_NAMES <= set(ops):
        family = [c for c in family if c.op in set(ops)]
    return [OpCase(op, t, label, tuple(sorted(prm.items())), seed) for op, t, label, prm in shaped] + family


def find_case(case_id: str, type_names: Iterable[str], kv_dtypes: Iterable[str] = ("f32",)) -> OpCase:
    """The case named `case_id` (op/type/shape/sSEED); the seed may differ from the grid's.

    An id that names no case of this backend is a UsageError (one line, exit 2)."""
    base, _, seed_part = case_id.rpartition("/s")
    try:
        seed = int(seed_part)
    except ValueError:
        base, seed = case_id, 0
    for case in grid(type_names, seed, kv_dtypes):
        if case.id == f"{base}/s{seed}":
            return case
    raise UsageError(f"unknown case id {case_id!r} for this backend (ids are op/type/shape/sSEED, "
                     "as a failing run prints them)")
