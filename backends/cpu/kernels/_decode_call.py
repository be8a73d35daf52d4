"""Which kernel multiplies a sequence's few rows by one weight: chosen once, called two ways.

A plan picks the decode kernel of each weight once (`decode_call`). Python steps call the
`DecodeCall`; a compiled decode program (`../program.py`) calls `decode_matmul` with its
fields, which branches to the very same entry points. Kinds:

    INTERLEAVED  int8 activations on rows interleaved eight at a time (`_interleaved.py`)
    GROUPED_Q8   int8 activations, grouped kernel on GGML rows (`_grouped.py`)
    GROUPED      float activations, grouped kernel
    FUSED        float activations, the per-token kernel (formats the grouped one lacks)
    MULTI        INTERLEAVED for two or three weights of one format reading the same rows (q, k,
                 v; gate, up) in one parallel loop: `interleaved_multi`, `decode_matmul_multi`

Each format's kernel compiles on first use only (a model uses two or three of thirteen), so a
program's dispatch names only the (kind, format) pairs its model uses: `decode_matmul` takes
them as a literal string (`formats_key`) and its overload writes the branches for those alone.
"""
from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numba import types
from numba.extending import overload

from . import _api
from . import _interleaved
from ._grouped import GROUP_MAX, has_grouped, has_grouped_q8
from ._interleaved import empty_weight, read_only
from .interleaved import LAYOUTS, ROWS, tile_bytes

INTERLEAVED, GROUPED_Q8, GROUPED, FUSED, MULTI = 0, 1, 2, 3, 4


@attrs.frozen(eq=False)
class DecodeCall:
    """One weight's decode kernel: `call(X, OUT)` computes OUT = X @ W.T for a few rows of X,
    each row's bits independent of the others."""

    kind: int
    code: int
    weight: np.ndarray  # interleaved (INTERLEAVED) or GGML rows, uint8 2-D
    cols: int
    tile: int = 0  # the interleaved layout's offsets (`interleaved.TileLayout`)
    q: int = 0
    m: int = -1
    hb: int = -1

    @property
    def rows(self) -> int:
        return self.weight.shape[0] * (ROWS if self.kind == INTERLEAVED else 1)

    def __call__(self, X: np.ndarray, OUT: np.ndarray) -> None:
        if X.shape[1] != self.cols or OUT.shape != (X.shape[0], self.rows):
            raise ValueError(f"expected X float32[T, {self.cols}] and OUT float32[T, {self.rows}]")
        w = self.weight
        if self.kind == INTERLEAVED:
            _interleaved.run_interleaved(self.code, w, X, OUT, self.tile, self.q, self.m, self.hb)
        elif self.kind == GROUPED_Q8:
            _api._GROUPED_Q8[self.code](w, X, OUT, GROUP_MAX)
        elif self.kind == GROUPED:
            _api._GROUPED[self.code](w, X, OUT, GROUP_MAX)
        else:
            _api.matmul_fused(self.code, w, X, OUT)


def decode_call(code: int, rows: np.ndarray, packed: np.ndarray | None, cols: int, int8: bool) -> DecodeCall:
    """The kernel for weight `rows` (format `code`, `cols` columns) on a sequence's few rows.

    `packed`: the weight interleaved (`interleaved.pack`), which int8 decode reads where there is
    one; else int8 takes the grouped int8 kernel where the format has one, and float activations
    the grouped float kernel, or the per-token one where the format lacks it."""
    code = int(code)
    if packed is not None:
        _interleaved.interleaved_kernel(code, packed, cols)  # checks the geometry
        lay = LAYOUTS.get(code)
        tile, q, m, hb = (lay.tile, lay.q, lay.m, lay.hb) if lay else (tile_bytes(code), 0, -1, -1)
        return DecodeCall(INTERLEAVED, code, packed, cols, tile, q, m, hb)
    _api._check(code, rows, cols)
    if int8 and has_grouped_q8(code):
        return DecodeCall(GROUPED_Q8, code, rows, cols)
    if has_grouped(code, cols):
        return DecodeCall(GROUPED, code, rows, cols)
    return DecodeCall(FUSED, code, rows, cols)


def interleaved_multi(calls: list[DecodeCall], X: np.ndarray, outs: list[np.ndarray]) -> None:
    """`call(X, out)` for each of two or three INTERLEAVED calls of one format and width, in one
    parallel loop; each row of each out gets the bits its own call gives."""
    if not 2 <= len(calls) <= 3 or len(outs) != len(calls):
        raise ValueError("two or three calls, one out each")
    first = calls[0]
    for call, out in zip(calls, outs):
        if call.kind != INTERLEAVED or call.code != first.code or call.cols != first.cols:
            raise ValueError("interleaved calls of one format and width only")
        if X.shape[1] != call.cols or out.shape != (X.shape[0], call.rows):
            raise ValueError(f"expected X float32[T, {call.cols}] and out float32[T, {call.rows}]")
    weights = [c.weight for c in calls] + [empty_weight()] * (3 - len(calls))
    outs = list(outs) + [outs[0]] * (3 - len(calls))  # never written: no row groups
    _interleaved._ENTRY[first.code](*weights, X, *outs, first.tile, first.q, first.m, first.hb)


def formats_key(pairs: set[tuple[int, int]]) -> str:
    """The literal that names (kind, format) pairs for `decode_matmul` and `decode_matmul_multi`."""
    return ",".join(sorted(f"{kind}:{code}" for kind, code in pairs)) or "none"


def _pairs(formats: Any) -> list[tuple[int, int]]:
    if formats.literal_value == "none":
        return []
    return [tuple(int(v) for v in pair.split(":")) for pair in formats.literal_value.split(",")]


def decode_matmul(formats, kind, code, w, X, OUT, tile, q, m, hb):  # pragma: no cover - compiled only
    """In compiled code: `DecodeCall(kind, code, w, ...)(X, OUT)` for a pair named in `formats`."""


@overload(decode_matmul)
def _decode_matmul(formats, kind, code, w, X, OUT, tile, q, m, hb):
    if not isinstance(formats, types.StringLiteral):
        return None
    pairs = [pair for pair in _pairs(formats) if pair[0] != MULTI]
    names: dict[str, object] = {"GROUP_MAX": GROUP_MAX, "fused": _api.matmul_fused, "np": np, "read_only": read_only}
    lines = ["def impl(formats, kind, code, w, X, OUT, tile, q, m, hb):"]
    for kind_, code_ in pairs:
        if kind_ == INTERLEAVED:  # the format's entry with two empty weights (`run_interleaved`)
            names[f"k{kind_}_{code_}"] = _interleaved._ENTRY[code_]
            call = (f"none = read_only(np.empty((0, 1), np.uint8))\n"
                    f"        k{kind_}_{code_}(w, none, none, X, OUT, OUT, OUT, tile, q, m, hb)")
        elif kind_ in (GROUPED_Q8, GROUPED):
            names[f"k{kind_}_{code_}"] = (_api._GROUPED_Q8 if kind_ == GROUPED_Q8 else _api._GROUPED)[code_]
            call = f"k{kind_}_{code_}(w, X, OUT, GROUP_MAX)"
        else:
            call = "fused(code, w, X, OUT)"
        lines += [f"    if kind == {kind_} and code == {code_}:", f"        {call}", "        return"]
    lines.append("    raise ValueError('decode_matmul: a (kind, format) pair the program was not built for')")
    exec("\n".join(lines), names)
    return names["impl"]


def decode_matmul_multi(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):  # pragma: no cover - compiled only
    """In compiled code: `interleaved_multi` for a format named as (MULTI, code) in `formats`."""


@overload(decode_matmul_multi)
def _decode_matmul_multi(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):
    if not isinstance(formats, types.StringLiteral):
        return None
    names: dict[str, object] = {}
    lines = ["def impl(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb):"]
    for kind_, code_ in _pairs(formats):
        if kind_ == MULTI:
            names[f"k{code_}"] = _interleaved._ENTRY[code_]
            lines += [f"    if code == {code_}:", f"        k{code_}(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb)",
                      "        return"]
    lines.append("    raise ValueError('decode_matmul_multi: a format the program was not built for')")
    exec("\n".join(lines), names)
    return names["impl"]


def team_matmul(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state):  # pragma: no cover
    """In compiled code, for one thread of a team: its share of `decode_matmul_multi`'s tasks (of
    `decode_matmul`'s, for one weight and two empty ones), for an interleaved format in `formats`."""


@overload(team_matmul)
def _team_matmul(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state):
    if not isinstance(formats, types.StringLiteral):
        return None
    names: dict[str, object] = {"team_tasks": _interleaved.team_tasks}
    lines = ["def impl(formats, code, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state):"]
    for code_ in sorted({code_ for kind_, code_ in _pairs(formats) if kind_ in (INTERLEAVED, MULTI)}):
        lines += [f"    if code == {code_}:",
                  f"        team_tasks({code_}, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state)",
                  "        return"]
    lines.append("    raise ValueError('team_matmul: a format the program was not built for')")
    exec("\n".join(lines), names)
    return names["impl"]


__all__ = ["DecodeCall", "decode_call", "formats_key", "decode_matmul", "decode_matmul_multi", "interleaved_multi",
           "team_matmul",
           "empty_weight", "INTERLEAVED", "GROUPED_Q8", "GROUPED", "FUSED", "MULTI"]
