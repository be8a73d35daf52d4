"""Backends registered for one test through the same hook a third-party package implements."""
from __future__ import annotations

import contextlib
import types
from typing import Iterator, Mapping

from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.plugins_runtime.registry import BackendInfo


@contextlib.contextmanager
def registered_backends(plugin: str, factories: Mapping[str, str], priority: int = 0) -> Iterator[None]:
    """Register `{backend name: "module:attr" factory}` as plugin `plugin` while the block runs."""
    registry = get_registry()
    mod = types.ModuleType(plugin)

    @hookimpl
    def llamay_register_backends(register):
        for name, factory in factories.items():
            register(BackendInfo(name=name, factory=factory, priority=priority))

    mod.llamay_register_backends = llamay_register_backends
    registry.add_plugin(mod, plugin)
    try:
        yield
    finally:
        registry.remove_plugin(plugin)
