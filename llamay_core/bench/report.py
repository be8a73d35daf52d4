"""Printing bench results: the seed's table (md), json, jsonl, csv and sql for sqlite3."""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from llamay_core.bench.measure import Sample, fmt_seconds

RATE_PHASES = ("prefill", "decode", "pg", "sweep")


def header_lines(cond: dict[str, Any]) -> list[str]:
    return [
        f"llamay {cond['llamay_version']} · {cond['model_name']} · {cond['architecture']} · "
        f"{cond['threads']} threads · kernels {cond['kernels']} · matmul {cond['matmul']} · "
        f"gemm {cond['gemm']} · kv {cond['kv_dtype']}",
        f"weights {cond['weights_mib']:.2f} MiB · repack {cond['repack']} · context {cond['n_ctx']} · "
        f"prompt {cond['n_prompt']} · generate {cond['n_gen']}",
    ]


def markdown(cond: dict[str, Any], samples: list[Sample], extra_lines: list[str]) -> str:
    rows = [("phase", "rate", "best", "note")]
    for s in samples:
        # a depth (`-d`) names its rows: "decode @d1000"
        at = f" @d{s.test.rsplit('@d', 1)[1]}" if "@d" in s.test else ""
        if s.phase in RATE_PHASES:
            rows.append((s.phase + at if s.phase != "sweep" else s.test, f"{s.rate:.1f} tok/s", fmt_seconds(s.best), s.note))
        elif s.phase == "ttft":
            rows.append(("ttft" + at, fmt_seconds(s.best), "", s.note))
        else:
            rows.append((s.test, fmt_seconds(s.best), "", s.note))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = header_lines(cond)
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    lines.extend(extra_lines)
    return "\n".join(lines)


def sample_dict(cond: dict[str, Any], s: Sample) -> dict[str, Any]:
    out = dict(cond)
    out.update({
        "test": s.test, "phase": s.phase, "n_tokens": s.tokens,
        "best_s": s.best, "avg_s": sum(s.seconds) / len(s.seconds),
        "best_ts": s.rate if s.phase in RATE_PHASES else None,
        "avg_ts": s.mean_rate if s.phase in RATE_PHASES else None,
        "samples_s": s.seconds,
        "samples_ts": [s.tokens / x for x in s.seconds] if s.phase in RATE_PHASES else [],
        "note": s.note, **{f"x_{k}": v for k, v in s.extra.items()},
    })
    return out


def as_json(cond: dict[str, Any], samples: list[Sample]) -> str:
    return json.dumps([sample_dict(cond, s) for s in samples], indent=2)


def as_jsonl(cond: dict[str, Any], samples: list[Sample]) -> str:
    return "\n".join(json.dumps(sample_dict(cond, s)) for s in samples)


def _flat(cond: dict[str, Any], samples: list[Sample]) -> tuple[list[str], list[list[Any]]]:
    dicts = [sample_dict(cond, s) for s in samples]
    keys: list[str] = []
    for d in dicts:
        keys.extend(k for k in d if k not in keys)
    rows = [[json.dumps(d.get(k)) if isinstance(d.get(k), (list, dict)) else d.get(k) for k in keys] for d in dicts]
    return keys, rows


def as_csv(cond: dict[str, Any], samples: list[Sample]) -> str:
    keys, rows = _flat(cond, samples)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    w.writerows(rows)
    return buf.getvalue().rstrip("\n")


def as_sql(cond: dict[str, Any], samples: list[Sample]) -> str:
    keys, rows = _flat(cond, samples)

    def sql_type(k: str) -> str:
        for r in rows:
            v = r[keys.index(k)]
            if isinstance(v, bool):
                return "INTEGER"
            if isinstance(v, int):
                return "INTEGER"
            if isinstance(v, float):
                return "REAL"
        return "TEXT"

    def lit(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return str(int(v))
        if isinstance(v, (int, float)):
            return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "NULL"
        return "'" + str(v).replace("'", "''") + "'"

    cols = ",\n  ".join(f"{k} {sql_type(k)}" for k in keys)
    lines = [f"CREATE TABLE IF NOT EXISTS llamay_bench (\n  {cols}\n);"]
    for r in rows:
        lines.append(f"INSERT INTO llamay_bench ({', '.join(keys)}) VALUES ({', '.join(lit(v) for v in r)});")
    return "\n".join(lines)


FORMATS = {"md": None, "json": as_json, "jsonl": as_jsonl, "csv": as_csv, "sql": as_sql}
