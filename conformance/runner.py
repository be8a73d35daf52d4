"""Checking backends end to end: op level, model level, and the record `bench`/`load()` read."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from llamay_conformance.cases import OpCase, find_case, grid
from llamay_conformance.harness import ReferenceOutputs, run_cases
from llamay_conformance.model_level import Effort, ReferenceModel, run_model_level
from llamay_conformance.report import BackendReport


class Conformance:
    """One run over one or more backends; reference results are computed once and shared."""

    def __init__(self, model: str | None = "smollm2:135m", effort: Effort | None = None, seed: int = 0,
                 create: Callable[[str], Any] | None = None) -> None:
        from llamay_core.engine.loader import create_backend

        self.model = model
        self.effort = effort or Effort()
        self.seed = seed
        self.create = create or create_backend
        self.reference = ReferenceOutputs(self.create("reference"), self.create)
        self._ref_model: ReferenceModel | None = None

    def reference_model(self) -> ReferenceModel:
        if self._ref_model is None:
            from llamay_core.files.model_names import resolve_model

            self._ref_model = ReferenceModel(resolve_model(str(self.model)))
        return self._ref_model

    def check(self, name: str, ops: bool = True, model: bool = True, case_ids: Iterable[str] = (),
              record: bool = True) -> BackendReport:
        """Check backend `name`; records the result when both levels ran (the "full" record)."""
        from llamay_core.graph.ops import OP_NAMES
        from llamay_core.plugins_runtime.manager import get_registry

        get_registry().backend_info(name)  # unknown name: a one-line BackendError
        report = BackendReport(backend=name)
        if name == "reference":  # what every other backend is compared with: never a pass of its own
            report.is_reference = True
            return report
        try:
            backend = self.create(name)
        except Exception as exc:
            report.skipped = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return report
        report.version = str(getattr(backend, "version", ""))
        report.device = backend.probe().device
        caps = backend.capabilities
        report.missing_ops = sorted(OP_NAMES - set(caps.ops))
        case_ids = list(case_ids)
        if case_ids:
            cases: list[OpCase] = [find_case(c, caps.weight_types, caps.kv_dtypes) for c in case_ids]
            report.cases = run_cases(cases, name, backend, self.reference, self.create)
            return report
        if ops:
            cases = grid(caps.weight_types, self.seed, caps.kv_dtypes, caps.ops)
            report.cases = run_cases(cases, name, backend, self.reference, self.create)
        if model:
            ref = self.reference_model()
            report.model = str(self.model)
            report.model_hash = ref.model.gguf.file_hash()
            with tempfile.TemporaryDirectory() as scratch:
                report.model_checks, report.placement = run_model_level(name, ref, self.effort, Path(scratch))
        if ops and model and record:
            save(report)
        return report


def save(report: BackendReport) -> Path:
    """Record a full run; `covers` lists what its passing model checks reached (multi-page, batching)."""
    from llamay_core.state.records import ConformanceRecord, save_record

    covers = sorted({c for m in report.model_checks if m.passed for c in m.covers})
    return save_record(ConformanceRecord(backend=report.backend, backend_version=report.version,
                                         model_hash=report.model_hash, passed=report.passed, level="full",
                                         summary=report.summary(), device=report.device, details=report.details(),
                                         covers=covers))
