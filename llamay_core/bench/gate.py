"""The correctness gate: no number is reported for a backend whose tokens are wrong."""
from __future__ import annotations

from typing import Any

from llamay_core.errors import CorrectnessGateError
from llamay_core.state.records import ConformanceRecord, find_records


def check_backend(model: Any) -> ConformanceRecord | None:
    """Pass silently, or raise CorrectnessGateError saying where the backend disagreed.

    Any failing record for (backend version, model hash) stops it. With no record at all, the
    quick check against reference runs on `model` and its outcome is recorded.
    """
    if model.backend.capabilities.is_reference:
        return None
    records = find_records(model.backend_name, str(model.backend.version), model.gguf.file_hash())
    if not records:
        from llamay_core.engine.quick_check import quick_check

        records = [quick_check(model)]
    failed = [r for r in records if not r.passed]
    if failed:
        raise CorrectnessGateError(
            f"backend {model.backend_name} disagrees with reference on this model ({failed[0].summary}); "
            "no numbers printed")
    return records[0]
