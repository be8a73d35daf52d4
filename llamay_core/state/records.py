"""Conformance records: which backend passed on which model. The core owns this format.

`llamay conformance` writes records; `bench` and `load(backend=None)` read them. One JSON file
per (backend, backend version, model hash) under $LLAMAY_HOME/conformance/.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import attrs

from llamay_core.files.model_names import llamay_home
from llamay_core.version import __version__


# "multi_page": contexts spanning several KV pages (a full last page included);
# "batching": several sequences of different lengths in one pass.
REQUIRED_COVERAGE = frozenset({"multi_page", "batching"})


@attrs.frozen
class ConformanceRecord:
    backend: str
    backend_version: str
    model_hash: str
    passed: bool
    level: str  # "full" (llamay conformance) or "quick" (a short greedy check)
    summary: str = ""
    device: str = ""
    llamay_version: str = __version__
    when: float = attrs.field(factory=time.time)
    details: dict[str, Any] = attrs.field(factory=dict)
    # What the checks behind this record exercised. `load(backend=None)` auto-picks a backend only
    # with a passing record whose coverage includes every entry of REQUIRED_COVERAGE.
    covers: list[str] = attrs.field(factory=list)

    def trusted_for_auto_pick(self) -> bool:
        """Passed, and its checks reached multi-page contexts and batched sequences."""
        return self.passed and REQUIRED_COVERAGE <= set(self.covers)


def records_dir() -> Path:
    """$LLAMAY_RECORDS_DIR if set (tests use a scratch folder), else $LLAMAY_HOME/conformance."""
    override = os.environ.get("LLAMAY_RECORDS_DIR")
    return Path(override) if override else llamay_home() / "conformance"


def _path(backend: str, backend_version: str, model_hash: str, level: str) -> Path:
    return records_dir() / f"{backend}-v{backend_version}-{model_hash}-{level}.json"


def save_record(record: ConformanceRecord) -> Path:
    path = _path(record.backend, record.backend_version, record.model_hash, record.level)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(attrs.asdict(record), indent=1))
    tmp.replace(path)
    return path


def find_records(backend: str, backend_version: str, model_hash: str) -> list[ConformanceRecord]:
    """The full record and the quick one, those that exist, in that order."""
    out = []
    for level in ("full", "quick"):
        path = _path(backend, backend_version, model_hash, level)
        if path.exists():
            try:
                out.append(ConformanceRecord(**json.loads(path.read_text())))
            except (ValueError, TypeError):
                continue
    return out


def find_record(backend: str, backend_version: str, model_hash: str) -> ConformanceRecord | None:
    """The full record if there is one, else the quick one, else None."""
    found = find_records(backend, backend_version, model_hash)
    return found[0] if found else None


def all_records() -> list[ConformanceRecord]:
    out = []
    for path in sorted(records_dir().glob("*.json")):
        try:
            out.append(ConformanceRecord(**json.loads(path.read_text())))
        except (ValueError, TypeError):
            continue
    return out
