"""Choosing a backend when the user names none: the best one that is available and trusted.

Trusted means: `reference` (it is the definition), or a backend whose conformance record for
this model passed. A backend with no record gets a quick greedy check against reference, whose
result is recorded; a backend that failed is never picked. Never chosen by hook call order.
"""
from __future__ import annotations

from typing import Any

from llamay_core.errors import BackendError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.state.records import find_record


def choose_backend(gguf: GGUFFile, spec: ModelSpec) -> tuple[str, Any]:
    registry = get_registry()
    reasons = []
    for info in sorted(registry.backends.values(), key=lambda b: (-b.priority, b.name)):
        try:
            backend = info.create()
            availability = backend.probe()
        except Exception as exc:  # a broken plugin must not stop the load
            reasons.append(f"{info.name}: {exc}")
            continue
        if not availability.available:
            reasons.append(f"{info.name}: {availability.reason}")
            continue
        if not spec.graph.op_names() <= set(backend.capabilities.ops):
            continue
        if any(gguf.tensors[n].type_name not in backend.capabilities.weight_types for n in spec.graph.weight_names()):
            continue
        if info.name == "reference":
            return info.name, backend
        record = find_record(info.name, str(getattr(backend, "version", "")), gguf.file_hash())
        if record is None:
            from llamay_core.engine.quick_check import quick_check

            record = quick_check(gguf, spec, info.name, backend)
        if record.passed:
            return info.name, backend
        reasons.append(f"{info.name}: failed conformance ({record.summary})")
    raise BackendError("no usable backend: " + "; ".join(reasons))
