"""Registers the reference backend. Imports nothing heavy: the factory is a string."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="reference",
        factory="llamay_backends.reference.backend:ReferenceBackend",
        priority=0,
        description="NumPy, float32 with float64 where cheap; the truth other backends are checked against",
    ))
