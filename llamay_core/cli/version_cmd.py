"""`llamay version`: what is installed, what each backend can do here, and what it was checked on."""
from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

from llamay_core.errors import one_line
from llamay_core.host_info import cpu_features


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true", help="also limits, features and KV sizes")


def blas_name() -> str:
    import numpy as np

    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        return "unknown"


def auto_pick(name: str, backend: Any, records: list[Any]) -> str:
    """Why `llamay.load(model)` with no backend would or would not pick this backend."""
    from llamay_core.engine.backend_choice import trust_verdict

    if backend.capabilities.is_reference:
        return "always trusted (the reference): picked when no higher-priority backend is trusted"
    words = {"pick": "picked", "skip": "not picked", "check": "decided by a quick check"}
    parts = []
    for model_hash in sorted({r.model_hash for r in records}):
        verdict = trust_verdict(name, backend, model_hash)
        parts.append(f"model {model_hash}: {words[verdict.action]} ({verdict.reason})")
    parts.append(("other models" if parts else "every model") + ": quick check against reference on first use")
    return "; ".join(parts)


def backend_rows(verbose: bool) -> list[str]:
    from llamay_core.plugins_runtime.manager import get_registry
    from llamay_core.state.records import all_records

    from llamay_core.graph.ops import EXTENDED_OP_NAMES, OP_NAMES

    registry = get_registry()
    records = all_records()
    rows = []
    for info in sorted(registry.backends.values(), key=lambda b: (-b.priority, b.name)):
        package = registry.distributions.get(info.plugin, "?")
        head = f"  {info.name:<10} {package:<16} priority {info.priority:<4}"
        try:
            backend = info.create()
            availability = backend.probe()
        except Exception as exc:
            rows.append(f"{head} broken: {one_line(exc)} · auto-pick: never (it raised)")
            continue
        if not availability.available:
            rows.append(f"{head} unavailable: {availability.reason} · auto-pick: no (not available here)")
            continue
        caps = backend.capabilities
        mine = [r for r in records if r.backend == info.name and r.backend_version == str(backend.version)]
        if caps.is_reference:
            checked = "the reference (defines correctness)"
        elif mine:
            checked = "; ".join(f"{'PASS' if r.passed else 'FAIL'} {r.level} on model {r.model_hash}"
                                + (f" (covers {','.join(r.covers)})" if r.covers else "") for r in mine)
        else:
            checked = "no conformance record yet"
        coverage = f"{len(caps.ops & OP_NAMES)}/{len(OP_NAMES)} ops"
        if OP_NAMES - caps.ops:  # those run on the fallback backend (engine/split.py)
            coverage += f" (lacks {','.join(sorted(OP_NAMES - caps.ops))}: split to fallback)"
        family_ops = ",".join(sorted(caps.ops & EXTENDED_OP_NAMES)) or "none: split to fallback"
        coverage += f" · family ops {family_ops}"
        rows.append(f"{head} available ({caps.device_kind})  {availability.device}")
        rows.append(f"  {'':<10} types {','.join(sorted(caps.weight_types))[:90]}")
        rows.append(f"  {'':<10} {coverage} · kv {','.join(sorted(caps.kv_dtypes))} · conformance: {checked}")
        rows.append(f"  {'':<10} auto-pick: {auto_pick(info.name, backend, mine)}")
        if verbose and availability.details:
            for key, value in availability.details.items():
                rows.append(f"  {'':<10} {key}: {value}")
    for failure in registry.failures:
        rows.append(f"  plugin {failure.plugin} failed to load: {failure.error}")
    return rows


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from llamay_core.version import __version__

    print(f"llamay {__version__}")
    print(f"python {platform.python_version()} ({sys.executable}) · numpy {np.__version__} · blas {blas_name()}")
    print(f"cpu {platform.machine()} · simd {'+'.join(cpu_features()) or 'unknown'}")
    print("backends:")
    for row in backend_rows(args.verbose):
        print(row)
    if args.verbose:
        from llamay_core.plugins_runtime.manager import get_registry

        print("families: " + ", ".join(sorted(get_registry().families)))
        print("kv dtypes: f32 4 B, f16 2 B, vq8 1.0625 B per cached value (int8 + f16 scale per 32)")
    return 0
