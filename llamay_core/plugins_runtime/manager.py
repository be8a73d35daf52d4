"""The plugin manager: loads entry points of group ``llamay`` one by one, fail-soft.

One broken plugin must not break ``llamay --help``: each entry point is loaded and its hooks
called separately; failures are collected and shown by ``llamay version``. Set
``LLAMAY_STRICT_PLUGINS=1`` to re-raise instead (useful while writing a plugin).
The manager is the only global mutable state in llamay: one per process, built on first use.
"""
from __future__ import annotations

import functools
import os
import traceback
from importlib import metadata
from typing import Any

import attrs
import pluggy

from llamay_core import hookspecs
from llamay_core.errors import BackendError
from llamay_core.plugins_runtime.registry import (
    BACKEND_API_VERSION,
    BackendInfo,
    CommandInfo,
    FamilyInfo,
    PluginFailure,
)

ENTRY_POINT_GROUP = "llamay"


@attrs.define
class PluginRegistry:
    """Everything the installed plugins registered, plus what failed."""

    pm: pluggy.PluginManager
    backends: dict[str, BackendInfo] = attrs.Factory(dict)
    families: dict[str, FamilyInfo] = attrs.Factory(dict)
    commands: dict[str, CommandInfo] = attrs.Factory(dict)
    failures: list[PluginFailure] = attrs.Factory(list)
    distributions: dict[str, str] = attrs.Factory(dict)  # plugin name -> the package providing it
    strict: bool = False

    def add_plugin(self, module: Any, name: str) -> None:
        """Register one plugin module and collect what it declares."""
        try:
            self.pm.register(module, name=name)
        except Exception as exc:  # a malformed hookimpl
            self._fail(name, exc)
            return
        self._collect(module, name)

    def remove_plugin(self, name: str) -> None:
        """Unregister a plugin and forget what it declared (used by tests and tooling)."""
        module = self.pm.get_plugin(name)
        if module is not None:
            self.pm.unregister(module)
        for table in (self.backends, self.families, self.commands):
            for key in [k for k, v in table.items() if v.plugin == name]:
                del table[key]

    def _fail(self, plugin: str, exc: BaseException) -> None:
        if self.strict:
            raise exc
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        self.failures.append(PluginFailure(plugin=plugin, error=last))

    def _collect(self, module: Any, plugin: str) -> None:
        hooks = self.pm.hook

        def register_backend(info: BackendInfo) -> None:
            if not isinstance(info, BackendInfo):
                raise TypeError("register() expects a BackendInfo")
            if info.api_version != BACKEND_API_VERSION:
                raise ValueError(
                    f"backend {info.name!r} implements contract v{info.api_version}, "
                    f"llamay speaks v{BACKEND_API_VERSION}"
                )
            if info.name in self.backends:
                raise ValueError(f"backend name {info.name!r} is already registered by {self.backends[info.name].plugin}")
            self.backends[info.name] = attrs.evolve(info, plugin=plugin)

        def register_family(info: FamilyInfo) -> None:
            for arch in info.architectures:
                if arch in self.families:
                    raise ValueError(f"architecture {arch!r} is already registered by {self.families[arch].plugin}")
            for arch in info.architectures:
                self.families[arch] = attrs.evolve(info, plugin=plugin)

        def register_command(name: str, help: str, configure: Any, run: Any) -> None:
            if name in self.commands:
                raise ValueError(f"command {name!r} is already registered")
            self.commands[name] = CommandInfo(name, help, configure, run, plugin=plugin)

        for hook, callback in (
            (hooks.llamay_register_backends, register_backend),
            (hooks.llamay_register_families, register_family),
            (hooks.llamay_register_commands, register_command),
        ):
            impls = [i for i in hook.get_hookimpls() if i.plugin is module]
            for impl in impls:
                try:
                    impl.function(callback)
                except Exception as exc:
                    self._fail(plugin, exc)

    def backend_info(self, name: str) -> BackendInfo:
        try:
            return self.backends[name]
        except KeyError:
            known = ", ".join(sorted(self.backends)) or "none"
            raise BackendError(f"unknown backend {name!r} (installed: {known})") from None


def _new_registry() -> PluginRegistry:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    registry = PluginRegistry(pm=pm, strict=os.environ.get("LLAMAY_STRICT_PLUGINS") == "1")
    seen: set[str] = set()
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(ep.name)
        try:
            module = ep.load()
        except Exception as exc:
            registry._fail(f"{ep.name} ({ep.value})", exc)
            continue
        registry.distributions[ep.name] = ep.dist.name if ep.dist is not None else "?"
        registry.add_plugin(module, ep.name)
    return registry


@functools.lru_cache(maxsize=1)
def get_registry() -> PluginRegistry:
    """The process-wide plugin registry, loaded on first use."""
    return _new_registry()
