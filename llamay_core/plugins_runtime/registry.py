"""What plugins register: backends, families and commands, as plain attrs records."""
from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any, Callable

import attrs

BACKEND_API_VERSION = 1


def import_object(spec: str) -> Any:
    """Import ``"module:attr.sub"`` and return the attribute."""
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr_path.split(".")):
        obj = getattr(obj, part)
    return obj


def source_fingerprint(package_file: str, base: str = "1") -> str:
    """A backend version that changes whenever the backend's source files change.

    Conformance records are keyed by backend version, so a record made before an edit to a
    kernel never vouches for the edited kernel. Call with the backend package's `__file__`.
    """
    folder = Path(package_file).resolve().parent
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".py", ".comp", ".spv", ".wgsl", ".cu", ".cuh", ".metal") and "__pycache__" not in path.parts:
            h.update(path.relative_to(folder).as_posix().encode())
            h.update(path.read_bytes())
    return f"{base}+{h.hexdigest()[:10]}"


@attrs.frozen
class BackendInfo:
    """A backend as registered: cheap to create, imports nothing until `create()`."""

    name: str
    factory: str
    api_version: int = BACKEND_API_VERSION
    priority: int = 10
    description: str = ""
    plugin: str = ""  # filled in by the manager: the distribution/module that registered it

    def create(self) -> Any:
        return import_object(self.factory)()


@attrs.frozen
class FamilyInfo:
    """A model family: GGUF architecture names and the lazily imported graph builder."""

    architectures: tuple[str, ...] = attrs.field(converter=tuple)
    builder: str
    plugin: str = ""

    def build(self, gguf_file: Any) -> Any:
        return import_object(self.builder)(gguf_file)


@attrs.frozen
class CommandInfo:
    """A CLI subcommand contributed by a plugin."""

    name: str
    help: str
    configure: Callable[[Any], None]
    run: Callable[[Any], int]
    plugin: str = ""


@attrs.frozen
class PluginFailure:
    """A plugin that could not be loaded or registered something invalid."""

    plugin: str
    error: str
