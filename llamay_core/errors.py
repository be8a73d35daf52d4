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


class ConstraintLimitError(UsageError):
    """A request's grammar or schema went past what the constraint engine can follow mid-generation
    (e.g. a repetition too long for its parser): the request's fault, not the server's."""


class CorrectnessGateError(LlamayError):
    """A backend whose tokens disagree with reference: no numbers are reported (exit 3)."""

    exit_code = 3


class BackendFailure(BackendError):
    """A backend that raised while being probed, loaded, compiled or run: which step, and why."""

    def __init__(self, backend: str, stage: str, exc: BaseException) -> None:
        super().__init__(f"backend {backend!r} failed in {stage}: {one_line(exc)}")
        self.backend = backend
        self.stage = stage
        self.reason = f"{stage} raised {one_line(exc)}"


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
