"""A progress bar over op cases for `llamay conformance`, kept outside the runner.

The harness compiles each case once on the backend under test; handing the suite a backend
wrapper that advances the bar on `compile` counts cases without the runner knowing.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


class CountingBackend:
    """The backend under test, unchanged except that each compile advances the bar."""

    def __init__(self, backend: Any, bar: Any) -> None:
        self._backend, self._bar = backend, bar

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        self._bar.update(1)
        return self._backend.compile(*args, **kwargs)


class CaseProgress:
    """`create` for `Conformance`: wraps the backend being checked while `checking` is open."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.bar: Any = None

    def create(self, name: str) -> Any:
        from llamay_core.engine.loader import create_backend

        backend = create_backend(name)
        return CountingBackend(backend, self.bar) if name == self.current and self.bar is not None else backend

    @contextlib.contextmanager
    def checking(self, name: str, description: str) -> Iterator[Any]:
        from llamay_core.progress import progress_bar

        with progress_bar(None, description, unit="case", leave=True) as bar:
            self.current, self.bar = name, bar
            try:
                yield bar
            finally:
                self.current, self.bar = None, None
