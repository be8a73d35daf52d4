"""`llamay conformance -o html`: one self-contained page (inline CSS, no scripts, no links).

Per backend: what it was measured on (backend version, device, model and its hash, llamay
version), the op x type table with each cell coloured by its worst NMSE against the op's limit,
and the model level's checks, with their KL-divergence figures when the checks carry them.
"""
from __future__ import annotations

import html
import math
import time
from typing import Any, Iterable

import attrs

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1d1d1f; }
table { border-collapse: collapse; margin: .6em 0 1.4em; }
th, td { border: 1px solid #d0d0d5; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f5; }
td.cell { text-align: right; font-variant-numeric: tabular-nums; min-width: 5.5em; }
td.none { background: #fafafa; color: #aaa; text-align: center; }
.pass { color: #11702f; font-weight: 600; } .fail { color: #b3261e; font-weight: 600; }
.meta { color: #555; } small { color: #666; }
"""


def nmse_colour(nmse: float | None, limit: float, passed: bool) -> str:
    """Green far under the limit, through yellow, to orange at it; red when the case failed."""
    if not passed or nmse is None:
        return "#f4b4ae"
    if limit <= 0 or nmse <= 0:
        return "#b9e4c3"
    # position on a log scale from 1e-6 x limit (0) to the limit (1)
    t = min(max((math.log10(nmse / limit) + 6) / 6, 0.0), 1.0)
    hue = 130 - 100 * t  # 130 green .. 30 orange
    return f"hsl({hue:.0f}, 65%, 80%)"


def _e(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if value and (abs(value) < 1e-3 or abs(value) >= 1e4) else f"{value:.4g}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """A plain table of dicts (columns: the union of their keys, in first-seen order)."""
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = []
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            if isinstance(v, bool):
                cells.append(f"<td class='{'pass' if v else 'fail'}'>{'PASS' if v else 'FAIL'}</td>")
            else:
                cells.append(f"<td>{_e(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def op_type_table(report: Any, all_ops: Iterable[str]) -> str:
    """Ops down, weight types across; each cell the worst NMSE, coloured against the op's limit."""
    from llamay_conformance.limits import LIMITS

    rows = report.op_table()
    types = sorted({r["type"] for r in rows}, key=lambda t: (t != "-", t))
    by_key = {(r["op"], r["type"]): r for r in rows}
    ops = sorted(set(all_ops) | {r["op"] for r in rows})
    head = "<tr><th>op</th><th>limit</th>" + "".join(f"<th>{_e(t)}</th>" for t in types) + "</tr>"
    body = []
    for op in ops:
        limit = LIMITS.get(op, (None, ""))[0]
        cells = [f"<td title='{_e(LIMITS.get(op, (0, ''))[1])}'>{_e(op)}</td>",
                 f"<td>{'—' if limit is None else f'{limit:.0e}'}</td>"]
        for t in types:
            r = by_key.get((op, t))
            if r is None:
                cells.append("<td class='none'>·</td>")
                continue
            passed = not r["failed"]
            worst = r["worst_nmse"]
            text = "FAIL" if worst is None else f"{worst:.1e}"
            if r["failed"]:
                text += f" ({r['failed']}/{r['cases']} fail)"
            tip = f"{r['cases']} cases, worst NMSE {worst}, limit {r['limit']}"
            tip += " (graph split)" if r["split"] else ""
            cells.append(f"<td class='cell' style='background:{nmse_colour(worst, r['limit'], passed)}' "
                         f"title='{_e(tip)}'>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def kld_tables(report: Any) -> str:
    """The model level: every check with every figure it carries (mean/percentile KLD, top-1...)."""
    out = []
    if report.model_checks:
        out.append(table([attrs.asdict(m) if attrs.has(type(m)) else dict(m) for m in report.model_checks]))
    for key, value in report.details().items():
        if "kld" not in key.lower():
            continue
        out.append(f"<h4>{_e(key)}</h4>")
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            out.append(table(value))
        elif isinstance(value, dict):
            out.append(table([{"": k, "value": v} for k, v in value.items()]))
        else:
            out.append(f"<p>{_e(value)}</p>")
    return "".join(out) or "<p class='meta'>no model level in this run</p>"


def backend_section(report: Any, all_ops: Iterable[str], llamay_version: str) -> str:
    verdict = "skipped" if report.skipped else ("PASS" if report.passed else "FAIL")
    cls = "meta" if report.skipped else ("pass" if report.passed else "fail")
    model = f"model {report.model or '(op level only)'}" + (f" ({report.model_hash})" if report.model_hash else "")
    measured_on = (f"backend {report.backend} {report.version}".strip(), f"device {report.device or '?'}", model,
                   f"llamay {llamay_version}")
    parts = [f"<h2>{_e(report.backend)} <span class='{cls}'>{verdict}</span></h2>",
             "<p class='meta'>" + " · ".join(_e(x) for x in measured_on) + "</p>"]
    if report.skipped:
        parts.append(f"<p>skipped: {_e(report.skipped)}</p>")
        return "<section>" + "".join(parts) + "</section>"
    if report.missing_ops:
        parts.append(f"<p>lacks ops {_e(', '.join(report.missing_ops))}: "
                     "they ran on the fallback backend (graph split)</p>")
    parts.append("<h3>Ops × weight types: worst NMSE against reference</h3>")
    parts.append(op_type_table(report, all_ops))
    failed = [c for c in report.cases if not c.passed]
    if failed:
        parts.append(f"<p>failing cases (rerun one with <code>llamay conformance -backend {_e(report.backend)} "
                     "-case ID</code>):</p><ul>" + "".join(f"<li><code>{_e(c.id)}</code>: {_e(c.message)}</li>"
                                                   for c in failed) + "</ul>")
    parts.append("<h3>Model level: KL divergence and checks against reference</h3>")
    parts.append(kld_tables(report))
    if report.placement:
        parts.append(f"<p class='meta'>graph split: {_e(report.placement)}</p>")
    parts.append(f"<p><b>{_e(report.summary())}</b></p>")
    return "<section>" + "".join(parts) + "</section>"


def html_page(reports: list[Any]) -> str:
    """The whole page for one `llamay conformance` run."""
    from llamay_core.graph.ops import OP_NAMES
    from llamay_core.version import __version__

    from llamay_conformance.limits import LIMITS

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    legend = table([{"op": op, "NMSE limit": f"{limit:.0e}", "why": why}
                    for op, (limit, why) in sorted(LIMITS.items())])
    sections = "".join(backend_section(r, OP_NAMES, __version__) for r in reports)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>llamay conformance</title>"
            f"<style>{STYLE}</style></head><body><h1>llamay conformance</h1>"
            f"<p class='meta'>llamay {_e(__version__)} · {stamp} · cells: worst NMSE of the op's cases; "
            "green is far under the op's limit, orange near it, red failed</p>"
            f"{sections}<h2>Limits</h2>{legend}</body></html>\n")
