"""Registers the Metal backend. Imports nothing heavy: the factory is a string."""
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.registry import BackendInfo


@hookimpl
def llamay_register_backends(register):
    register(BackendInfo(
        name="metal",
        factory="llamay_backends.metal.backend:MetalBackend",
        priority=80,
        description="Apple GPUs through PyObjC's Metal bindings and MSL kernels (not run-verified)",
    ))
