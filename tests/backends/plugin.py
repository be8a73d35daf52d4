"""Registers the test backends (tests add this module as a plugin and remove it afterwards)."""
from __future__ import annotations

from typing import Any

from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo
from tests.backends.variants import VARIANTS

PLUGIN_NAME = "llamay_test_backends"


@hookimpl
def llamay_register_backends(register: Any) -> None:
    # Priority 100: were one of them trusted, load(backend=None) would pick it first.
    for name, (attr, _) in VARIANTS.items():
        register(BackendInfo(name=name, factory=f"tests.backends.variants:{attr}", priority=100,
                             description="llamay test backend (tests/backends)"))


def register() -> None:
    from llamay_core.plugins_runtime.manager import get_registry

    import tests.backends.plugin as module

    get_registry().add_plugin(module, PLUGIN_NAME)


def unregister() -> None:
    from llamay_core.plugins_runtime.manager import get_registry

    get_registry().remove_plugin(PLUGIN_NAME)
