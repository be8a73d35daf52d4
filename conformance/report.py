"""One backend's conformance result: the op x type table, the model checks, the record, the text."""
from __future__ import annotations

from typing import Any

import attrs

from llamay_conformance.harness import CaseResult
from llamay_conformance.model_level import ModelCheck


@attrs.define
class BackendReport:
    backend: str
    version: str = ""
    device: str = ""
    skipped: str = ""  # why the backend was not checked (unavailable here)
    cases: list[CaseResult] = attrs.Factory(list)
    model: str = ""
    model_hash: str = ""
    model_checks: list[ModelCheck] = attrs.Factory(list)
    placement: str = ""  # where each op ran when the model graph was split
    missing_ops: list[str] = attrs.Factory(list)
    is_reference: bool = False  # reference is what the others are compared with: never a pass of its own

    @property
    def passed(self) -> bool:
        return (not self.skipped and not self.is_reference and all(c.passed for c in self.cases)
                and all(m.passed for m in self.model_checks))

    def op_table(self) -> list[dict[str, Any]]:
        """Rows of (op, type): case count, failures, worst NMSE, limit."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for c in self.cases:
            row = rows.setdefault((c.op, c.type_name), {"op": c.op, "type": c.type_name, "cases": 0, "failed": 0,
                                                        "worst_nmse": 0.0, "limit": c.limit, "split": False})
            row["cases"] += 1
            row["failed"] += 0 if c.passed else 1
            row["split"] = row["split"] or bool(c.placement)
            if c.nmse is None:
                row["worst_nmse"] = None if not c.passed else row["worst_nmse"]
            elif row["worst_nmse"] is not None:
                row["worst_nmse"] = max(row["worst_nmse"], c.nmse)
        return list(rows.values())

    def summary(self) -> str:
        if self.is_reference:
            return "the reference: every other backend is compared with it, so it is not checked against itself"
        failed = [c for c in self.cases if not c.passed]
        parts = [f"{len(self.cases) - len(failed)}/{len(self.cases)} op cases pass"]
        if self.model_checks:
            bad = [m for m in self.model_checks if not m.passed]
            parts.append("model checks pass" if not bad else "model: " + "; ".join(f"{m.name} {m.summary}" for m in bad))
        if failed:
            parts.append(f"first failing case {failed[0].id}: {failed[0].message}")
        return ", ".join(parts)

    def details(self) -> dict[str, Any]:
        """What the record keeps: the table, failing cases, model checks, op coverage."""
        return {
            "ops": self.op_table(),
            "failed_cases": [{"id": c.id, "message": c.message} for c in self.cases if not c.passed],
            "model": [attrs.asdict(m) for m in self.model_checks],
            "missing_ops": self.missing_ops,
            "placement": self.placement,
        }

    def as_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "version": self.version, "device": self.device, "skipped": self.skipped,
                "reference": self.is_reference, "passed": None if self.is_reference else self.passed, "model": self.model, "model_hash": self.model_hash, "summary": self.summary(),
                "cases": [attrs.asdict(c) for c in self.cases], **self.details()}

    def markdown(self) -> str:
        head = f"## {self.backend} {self.version} · {self.device}".rstrip(" ·")
        if self.skipped:
            return f"{head}\n\nskipped: {self.skipped}\n"
        if self.is_reference:
            return f"## {self.backend}\n\n**{self.backend}: the reference** — {self.summary()}\n"
        lines = [head, ""]
        if self.missing_ops:
            lines.append(f"lacks ops {', '.join(self.missing_ops)}: they run on the fallback backend (graph split)")
            lines.append("")
        if self.cases:
            lines += ["| op | type | cases | result | worst NMSE | limit |", "|---|---|---|---|---|---|"]
            for row in self.op_table():
                result = "PASS" if not row["failed"] else f"FAIL {row['failed']}"
                worst = "—" if row["worst_nmse"] is None else f"{row['worst_nmse']:.2e}"
                op = row["op"] + (" (split)" if row["split"] else "")
                lines.append(f"| {op} | {row['type']} | {row['cases']} | {result} | {worst} | {row['limit']:.0e} |")
            failed = [c for c in self.cases if not c.passed]
            if failed:
                lines += ["", "failing cases (rerun one with `llamay conformance -backend "
                              f"{self.backend} -case ID`):"]
                lines += [f"- `{c.id}`: {c.message}" for c in failed]
        if self.model_checks:
            lines += ["", f"model {self.model} ({self.model_hash}):", "", "| check | result | detail |", "|---|---|---|"]
            lines += [f"| {m.name} | {'PASS' if m.passed else 'FAIL'} | {m.summary} |" for m in self.model_checks]
            if self.placement:
                lines += ["", f"graph split: {self.placement}"]
        lines += ["", f"**{self.backend}: {'PASS' if self.passed else 'FAIL'}** — {self.summary()}", ""]
        return "\n".join(lines)
