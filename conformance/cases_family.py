"""Op cases for the family ops (`rope_table`, `columns`, `moe`), in the grid's format.

`family_cases` returns the OpCases that `cases.grid` adds to every backend's grid, and
`build_family_case` builds one (`cases.build` hands these ops here). Their limits are in
limits.py. A backend that lacks one of these ops runs it through the split, so every backend
gets these cases.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from llamay_conformance.cases import BuiltCase, OpCase, _one_op
from llamay_conformance.weights import GRID_TYPES, block_size, random_tensor
from llamay_core.graph import ops as G

def _yarn_like_freqs(n_rot: int, base: float) -> tuple[float, ...]:
    """Frequencies with per-pair divisors and a ramp, as a Llama 3 or YaRN file produces."""
    i = np.arange(n_rot // 2)
    ramp = np.clip((i - 2) / 8, 0, 1)
    return tuple(float(f) for f in base ** (-2 * i / n_rot) / (1 + 7 * ramp))


def family_cases(type_names: Iterable[str], seed: int = 0) -> list[OpCase]:
    """Every family-op case for a backend that reads `type_names`."""
    shaped: list[tuple[str, str, str, dict]] = [
        ("rope_table", "-", "normal-h3x64-p0", {"t": 7, "heads": 3, "dim": 64, "rot": 64, "mode": "normal", "pos": 0}),
        ("rope_table", "-", "neox-h2x128-rot64-p8190-ms1.2", {"t": 3, "heads": 2, "dim": 128, "rot": 64, "mode": "neox",
                                                             "pos": 8190, "mscale": 1.2}),
        ("columns", "-", "t7xw96-16+48", {"t": 7, "w": 96, "start": 16, "width": 48}),
        ("columns", "-", "t1xw64-0+64", {"t": 1, "w": 64, "start": 0, "width": 64}),
    ]
    for t in [t for t in GRID_TYPES if t in set(type_names)]:
        d = max(64, block_size(t)) if block_size(t) > 1 else 64
        shaped += [
            ("moe", t, f"t1xd{d}-e4k2-norm", {"t": 1, "d": d, "ff": d, "experts": 4, "used": 2, "normalize": True}),
            ("moe", t, f"t9xd{d}-e8k3", {"t": 9, "d": d, "ff": d, "experts": 8, "used": 3, "normalize": False}),
        ]
    return [OpCase(op, t, label, tuple(sorted(prm.items())), seed) for op, t, label, prm in shaped]


def build_family_case(case: OpCase) -> BuiltCase:
    rng = np.random.default_rng([case.seed, sum(map(ord, case.id))])
    p = case.param
    if case.op == "rope_table":
        t, heads, dim, rot = p("t"), p("heads"), p("dim"), p("rot")
        freqs = _yarn_like_freqs(rot, 10000.0)
        return _one_op(rng, t, {"x": heads * dim},
                       lambda x: G.RopeTable("out", x, heads, dim, rot, p("mode"), freqs, p("mscale") or 1.0),
                       positions=range(p("pos"), p("pos") + t))
    if case.op == "columns":
        return _one_op(rng, p("t"), {"x": p("w")}, lambda x: G.Columns("out", x, p("start"), p("width")))
    if case.op == "moe":
        d, ff, e = p("d"), p("ff"), p("experts")
        s = 1 / 18 if case.type_name == "IQ4_XS" else 1.0  # its 6-bit sub-scales multiply random blocks by ~18
        extra = {"router": random_tensor("router", "F32", (e, d), rng, scale=0.5),
                 "gate": random_tensor("gate", case.type_name, (e, ff, d), rng, scale=s),
                 "up": random_tensor("up", case.type_name, (e, ff, d), rng, scale=s),
                 "down": random_tensor("down", case.type_name, (e, d, ff), rng, scale=s)}
        return _one_op(rng, p("t"), {"x": d},
                       lambda x: G.Moe("out", x, "router", "gate", "up", "down", e, p("used"), p("normalize")),
                       extra=extra)
    raise KeyError(f"no family cases for op {case.op!r}")
