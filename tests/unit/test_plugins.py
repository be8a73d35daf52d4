"""The plugin registry: discovery, temporary plugins, fail-soft loading, documented hooks."""
from __future__ import annotations

import inspect
import types

import pytest

from llamay_core import hookspecs
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.plugins_runtime.registry import BackendInfo, FamilyInfo


def test_every_hookspec_has_a_docstring_for_authors():
    specs = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("llamay_")]
    assert len(specs) >= 3
    for f in specs:
        doc = inspect.getdoc(f) or ""
        assert len(doc) > 200, f"{f.__name__} needs a docstring for plugin authors"


def test_first_party_plugins_come_through_entry_points():
    registry = get_registry()
    assert "reference" in registry.backends
    assert {"llama", "qwen2"} <= set(registry.families)
    assert registry.distributions[registry.backends["reference"].plugin] == "llamay"


@pytest.fixture()
def temporary_plugin():
    registry = get_registry()
    names = []

    def add(module, name):
        registry.add_plugin(module, name)
        names.append(name)

    yield add
    for name in names:
        registry.remove_plugin(name)
    registry.failures[:] = [f for f in registry.failures if f.plugin not in names]


def test_temporary_backend_and_family_register_and_leave(temporary_plugin):
    mod = types.ModuleType("fake_plugin")

    @hookimpl
    def llamay_register_backends(register):
        register(BackendInfo(name="fakebk", factory="nowhere:Nothing", priority=1))

    @hookimpl
    def llamay_register_families(register):
        register(FamilyInfo(architectures=("fakearch",), builder="nowhere:build"))

    mod.llamay_register_backends = llamay_register_backends
    mod.llamay_register_families = llamay_register_families
    temporary_plugin(mod, "fake_plugin")
    registry = get_registry()
    assert registry.backends["fakebk"].plugin == "fake_plugin"
    assert "fakearch" in registry.families
    registry.remove_plugin("fake_plugin")
    assert "fakebk" not in registry.backends and "fakearch" not in registry.families


def test_a_broken_plugin_is_listed_and_the_rest_keeps_working(temporary_plugin):
    mod = types.ModuleType("broken_plugin")

    @hookimpl
    def llamay_register_backends(register):
        raise RuntimeError("driver exploded")

    mod.llamay_register_backends = llamay_register_backends
    temporary_plugin(mod, "broken_plugin")
    registry = get_registry()
    assert any(f.plugin == "broken_plugin" and "driver exploded" in f.error for f in registry.failures)
    assert "reference" in registry.backends


def test_duplicate_backend_name_is_a_failure_not_a_silent_override(temporary_plugin):
    mod = types.ModuleType("dup_plugin")

    @hookimpl
    def llamay_register_backends(register):
        register(BackendInfo(name="reference", factory="x:y"))

    mod.llamay_register_backends = llamay_register_backends
    temporary_plugin(mod, "dup_plugin")
    registry = get_registry()
    assert registry.backends["reference"].plugin != "dup_plugin"
    assert any(f.plugin == "dup_plugin" for f in registry.failures)
