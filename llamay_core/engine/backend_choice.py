"""Choosing a backend when the user names none: the best one that is available and trusted.

Candidates are tried by priority, never by hook call order. Trusted means: the reference (it is
the definition, `Capabilities.is_reference`), or a backend with a passing record for this model
whose checks covered multi-page contexts and batching. A backend with no such record and no
failing one gets the quick check against reference (`quick_check.py`), which is recorded.

A backend never crashes the load: whatever it raises (probe, load_weights, compile, a pass of the
quick check) is recorded as a failure for (backend, version, model), logged as one warning line,
and the next candidate is tried. A backend with a failing record is skipped with the same warning.
"""
from __future__ import annotations

import logging
from typing import Any

import attrs

from llamay_core.engine.loader import ModelBuild, check_contract
from llamay_core.engine.model import Model
from llamay_core.engine.quick_check import quick_check
from llamay_core.errors import BackendError, BackendFailure, ModelFileError, one_line
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.plugins_runtime.registry import BackendInfo
from llamay_core.state.records import ConformanceRecord, find_records, save_record

log = logging.getLogger("llamay")


@attrs.frozen
class Verdict:
    """What auto-selection would do with one backend for one model, before loading anything.

    `action`: "pick" (trusted), "check" (the quick check decides), or "skip" (with `reason`).
    """

    action: str
    reason: str
    warn: bool = False  # a failure the user should hear about, not a plain "not here"


def candidates() -> list[BackendInfo]:
    """Registered backends, highest priority first (ties by name)."""
    return sorted(get_registry().backends.values(), key=lambda b: (-b.priority, b.name))


def trust_verdict(name: str, backend: Any, model_hash: str) -> Verdict:
    """Trusted, to be checked, or skipped, from the backend's capabilities and its records."""
    if backend.capabilities.is_reference:
        return Verdict("pick", "the reference (defines correctness)")
    records = find_records(name, str(backend.version), model_hash)
    failed = [r for r in records if not r.passed]
    if failed:
        return Verdict("skip", f"failed its {failed[0].level} check on this model ({failed[0].summary})", warn=True)
    if any(r.trusted_for_auto_pick() for r in records):
        return Verdict("pick", "passed conformance on this model")
    if records:
        return Verdict("check", "its passing record does not cover multi-page contexts and batching: quick check")
    return Verdict("check", "no record for this model: quick check on first use")


def verdict_for(info: BackendInfo, backend: Any, build: ModelBuild) -> Verdict:
    """The verdict for a created backend: availability, then fit for this model, then trust."""
    availability = backend.probe()
    if not availability.available:
        return Verdict("skip", f"unavailable: {availability.reason}")
    unfit = build.usable_on(backend)
    if unfit:
        return Verdict("skip", unfit)
    return trust_verdict(info.name, backend, build.gguf.file_hash())


def record_failure(name: str, backend: Any, model_hash: str, reason: str) -> None:
    """Save a failing quick record so the backend is not tried again until its version changes."""
    save_record(ConformanceRecord(backend=name, backend_version=str(backend.version),
                                  model_hash=model_hash, passed=False, level="quick", summary=reason))


def try_backend(info: BackendInfo, build: ModelBuild) -> tuple[Model | None, str]:
    """(the loaded model, "") or (None, why not); warns about and records backend failures."""
    try:
        backend = info.create()
    except Exception as exc:  # a missing driver package or a broken plugin: nothing to record against
        return None, f"unavailable: {one_line(exc)}"
    try:
        check_contract(info.name, backend)
    except BackendError as exc:
        log.warning("backend %s skipped: %s", info.name, exc)
        return None, str(exc)
    model = None
    stage = "probe"
    try:
        verdict = verdict_for(info, backend, build)
        if verdict.action == "skip":
            if verdict.warn:
                log.warning("backend %s skipped: %s", info.name, verdict.reason)
            return None, verdict.reason
        stage = "loading"
        model = build.on(info.name, backend)
        if verdict.action == "pick":
            return model, ""
        stage = "the quick check"
        record = quick_check(model)  # saved whatever the outcome
        if record.passed:
            return model, ""
        reason = f"failed the quick check against reference ({record.summary})"
    except ModelFileError:
        raise  # the file's fault, not the backend's: every backend would fail the same way
    except Exception as exc:  # a backend must never crash the load: record, warn, move on
        reason = exc.reason if isinstance(exc, BackendFailure) else f"{stage} raised {one_line(exc)}"
        record_failure(info.name, backend, build.gguf.file_hash(), reason)
    log.warning("backend %s skipped: %s", info.name, reason)
    close_quietly(model if model is not None else backend)
    return None, reason


def close_quietly(obj: Any) -> None:
    """Release what a rejected candidate holds; its close() failing must not stop the load either."""
    try:
        obj.close()
    except Exception as exc:
        log.debug("close() of a rejected backend raised %s", one_line(exc))


def load_on_best_backend(build: ModelBuild) -> Model:
    """The model on the highest-priority backend that is available, fit and trusted for it."""
    reasons = []
    for info in candidates():
        model, reason = try_backend(info, build)
        if model is not None:
            return model
        reasons.append(f"{info.name}: {reason}")
    raise BackendError("no usable backend: " + "; ".join(reasons))
