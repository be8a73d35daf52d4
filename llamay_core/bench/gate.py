"""The correctness gate: no number is reported for a backend whose tokens are wrong."""
from __future__ import annotations

from typing import Any

from llamay_core.errors import CorrectnessGateError
from llamay_core.state.records import ConformanceRecord, find_record, save_record


def check_backend(model: Any) -> ConformanceRecord | None:
    """Pass silently, or raise CorrectnessGateError saying where the tokens diverged.

    Uses the conformance record for (backend version, model hash) when there is one; otherwise
    compares a short greedy run against reference and records the outcome.
    """
    if model.backend_name == "reference":
        return None
    version = str(getattr(model.backend, "version", ""))
    model_hash = model.gguf.file_hash()
    record = find_record(model.backend_name, version, model_hash)
    if record is None:
        from llamay_core.engine.quick_check import compare_greedy

        passed, summary, _, _ = compare_greedy(model.gguf.path, model.backend_name, candidate=model)
        record = ConformanceRecord(backend=model.backend_name, backend_version=version, model_hash=model_hash,
                                   passed=passed, level="quick", summary=summary,
                                   device=model.backend.probe().device)
        save_record(record)
    if not record.passed:
        raise CorrectnessGateError(
            f"backend {model.backend_name} disagrees with reference on this model ({record.summary}); "
            "no numbers printed")
    return record
