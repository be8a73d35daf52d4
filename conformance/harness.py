"""Running op cases on a backend and on reference, through the backend contract only.

For each case: load the weights, get a page store, compile (through the engine's graph split
when the backend lacks an op, so the split is covered too), fill every KV page with a poison
value, run the poison pass (NaN inputs), poison the pages again, run the real passes, and compare
each output with reference's: same shape, all finite, NMSE under the op's limit.

"Poisoned" for this contract means: every KV page the harness owns holds a huge finite value
before the real pass (whatever the KV dtype), and every buffer the backend reuses between calls
last held NaN. An element the backend does not write therefore shows up as NaN or as a huge
error, never as a lucky match.

A "solo" case also compares the backend with itself: the row run alone against the same row
in the full batch, under the op's limit.
"""
from __future__ import annotations

import traceback
from typing import Any, Callable, Iterable

import attrs
import numpy as np

from llamay_core.engine.split import compile_split
from llamay_conformance.cases import BuiltCase, OpCase, build
from llamay_conformance.limits import limit_for

# A finite poison for KV pages: reading an unwritten slot gives a huge score or value (a clear
# failure), while a masked slot multiplied by a zero probability still contributes 0.
POISON_KV = np.float32(-1e30)
# For f16 and vq8 pages the byte pair ff fb: the f16 -65504 in every 2-byte field (f16 values,
# vq8 scales), and int8 quants -1 and -5, so every stale vq8 value decodes to 65504 or 327520.
POISON_HALF = b"\xff\xfb"


@attrs.frozen
class CaseResult:
    id: str
    op: str
    type_name: str
    shape: str
    passed: bool
    nmse: float | None
    limit: float
    message: str = ""
    placement: str = ""  # "" on one backend, else which backend ran which ops


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    """sum((a-b)^2) / sum(b^2), in float64."""
    a, b = got.astype(np.float64), want.astype(np.float64)
    num = float(np.sum((a - b) ** 2))
    den = float(np.sum(b * b))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def poison_pages(store: Any) -> None:
    """Fill every page of the store with a huge finite value in its dtype's encoding."""
    size = len(store.read_page(0))
    if store.spec.dtype == "f32":
        data = np.full(size // 4, POISON_KV, np.float32).tobytes()
    else:
        data = (POISON_HALF * (size // 2 + 1))[:size]
    for page in range(store.spec.max_pages):
        store.write_page(page, data)


def compile_case(name: str, backend: Any, built: BuiltCase, create: Callable[[str], Any]) -> tuple[Any, Any, str]:
    """(store, executable, placement) for a case; splits the graph when the backend lacks ops."""
    missing = built.graph.op_names() - set(backend.capabilities.ops)
    if missing:
        store, exe = compile_split(built.graph, built.tensors, built.kv_spec, name, backend, create)
        placement = " | ".join(f"{b}:{'+'.join(ops)}" for b, ops in exe.placement())
        return store, exe, placement
    weights = backend.load_weights(built.tensors)
    store = backend.kv_store(built.kv_spec)
    return store, backend.compile(built.graph, weights, store), ""


def run_built(name: str, backend: Any, built: BuiltCase, create: Callable[[str], Any]) -> tuple[list[np.ndarray], str]:
    """Outputs of every real pass, after a poison pass; plus the placement for split runs."""
    store, exe, placement = compile_case(name, backend, built, create)
    poison_pages(store)
    for p in built.passes:
        exe(p.poisoned())
    poison_pages(store)
    return [np.array(exe(p.real()), copy=True) for p in built.passes], placement


class ReferenceOutputs:
    """Reference results per case id, computed once per process (every backend compares to them)."""

    def __init__(self, reference: Any, create: Callable[[str], Any]) -> None:
        self.reference, self.create = reference, create
        self._cache: dict[str, list[np.ndarray]] = {}

    def get(self, case: OpCase, built: BuiltCase) -> list[np.ndarray]:
        if case.id not in self._cache:
            self._cache[case.id] = run_built("reference", self.reference, built, self.create)[0]
        return self._cache[case.id]


def check_case(case: OpCase, name: str, backend: Any, reference: ReferenceOutputs,
               create: Callable[[str], Any]) -> CaseResult:
    limit = limit_for(case.op)
    base = dict(id=case.id, op=case.op, type_name=case.type_name, shape=case.shape, limit=limit)
    built = build(case)
    want = reference.get(case, built)
    try:
        got, placement = run_built(name, backend, built, create)
    except Exception as exc:  # a crashing op is a failing op, with the reason shown
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return CaseResult(**base, passed=False, nmse=None, message=f"raised {last}")
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        where = f" (pass {i + 1})" if len(want) > 1 else ""
        if g.shape != w.shape:
            return CaseResult(**base, passed=False, nmse=None, placement=placement,
                              message=f"shape {list(g.shape)}, expected {list(w.shape)}{where}")
        bad = ~np.isfinite(g)
        if bad.any():
            rows = sorted(set(np.nonzero(bad)[0].tolist()))
            return CaseResult(**base, passed=False, nmse=None, placement=placement,
                              message=f"{int(bad.sum())} NaN/Inf values in rows {rows[:8]}{where}")
        worst = max(worst, nmse(g, w))
    solo = case.param("solo")
    if solo is not None:
        apart = nmse(got[0][solo], got[1][0])
        if apart > limit:
            return CaseResult(**base, passed=False, nmse=worst, placement=placement,
                              message=f"row {solo} alone differs from the same row among {len(got[0]) - 1} others: "
                                      f"NMSE {apart:.3g} > limit {limit:.0e}")
    passed = worst <= limit
    return CaseResult(**base, passed=passed, nmse=worst, placement=placement,
                      message="" if passed else f"NMSE {worst:.3g} > limit {limit:.0e}")


def run_cases(cases: Iterable[OpCase], name: str, backend: Any, reference: ReferenceOutputs,
              create: Callable[[str], Any]) -> list[CaseResult]:
    return [check_case(c, name, backend, reference, create) for c in cases]
