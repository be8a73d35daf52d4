"""Errors users see. Each carries a one-line message; the CLI prints it and exits 2."""


class LlamayError(Exception):
    """Base for every error llamay reports to a user as one line."""

    exit_code = 2


class ModelFileError(LlamayError):
    """A model file that cannot be used: names the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class ModelNotFoundError(LlamayError):
    """A model name or path that does not resolve to a file."""


class BackendError(LlamayError):
    """A backend that is unknown, unavailable, or failed its checks."""


class SnapshotError(LlamayError):
    """A snapshot file that cannot be restored into this model."""


class ContextOverflowError(LlamayError):
    """More tokens than the context holds."""


class UsageError(LlamayError):
    """A bad argument value from a user."""


class CorrectnessGateError(LlamayError):
    """A backend whose tokens disagree with reference: no numbers are reported (exit 3)."""

    exit_code = 3
