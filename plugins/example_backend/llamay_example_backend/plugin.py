"""Registration: cheap, no heavy import. llamay imports the factory only when the backend is used."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="example",
        factory="llamay_example_backend.backend:ExampleBackend",
        # Below reference (0): an example is never picked by load(backend=None) over the truth.
        # A real backend that is faster than cpu would use a priority above 50.
        priority=-10,
        description="example third-party backend (NumPy, float32)",
    ))
