"""The hooks through which backends, model families and commands plug into llamay.

This module is the documentation for plugin authors. A plugin is any importable module listed
under the entry-point group ``llamay`` in its distribution's metadata::

    [project.entry-points.llamay]
    my_backend = "my_package.plugin"

and implements one or more of the hooks below with ``@llamay_core.hookspecs.hookimpl``.
llamay's own backends and families register through exactly this route.

Registration hooks must be cheap: they are called when llamay starts (even for ``--help``),
so they must not import heavy libraries (cupy, wgpu, vulkan, numba) or touch a device.
Name a factory as a ``"module:attribute"`` string; llamay imports it only when the backend is
first used. Pluggy is never on the per-token path: hooks hand over objects once, and the engine
calls those objects directly afterwards.
"""
from __future__ import annotations

from typing import Callable

import pluggy

PROJECT_NAME = "llamay"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def llamay_register_backends(register: Callable[..., None]) -> None:
    """Declare compute backends.

    Called once when the plugin manager loads. Call ``register(info)`` once per backend, where
    ``info`` is a :class:`llamay_core.plugins_runtime.registry.BackendInfo`::

        @hookimpl
        def llamay_register_backends(register):
            register(BackendInfo(name="mygpu", api_version=1,
                                 factory="my_package.backend:MyGpuBackend", priority=60))

    ``name`` is what users pass to ``-backend``; it must be unique across installed plugins
    (a second registration of a name is reported as a plugin failure, never silently chosen).
    ``api_version`` is the backend contract version you implement (currently 1).
    ``factory`` is imported lazily and called with no arguments the first time the backend is
    used; it returns an object implementing :class:`llamay_core.backend_api.Backend`.
    ``priority`` orders backends for ``load(backend=None)`` among those that are available and
    trusted for the model (a passing conformance record or quick check that covered multi-page
    contexts and batching; anything your backend raises on the way is recorded as a failure and
    the next candidate is tried); higher wins (reference is 0, cpu 50).

    Return value: ignored. Exceptions raised here are caught; the plugin is listed as failed
    in ``llamay version`` and every other plugin keeps working.
    """


@hookspec
def llamay_register_families(register: Callable[..., None]) -> None:
    """Declare model families (architectures) that can build an op graph from a GGUF file.

    Call ``register(info)`` with a :class:`llamay_core.plugins_runtime.registry.FamilyInfo`::

        register(FamilyInfo(architectures=("llama",), builder="my_package.llama:build"))

    ``architectures`` are the values of the GGUF key ``general.architecture`` this family
    handles. ``builder`` (a ``"module:attribute"`` string, imported lazily) is called as
    ``builder(gguf_file)`` with a :class:`llamay_core.files.gguf_file.GGUFFile` and returns a
    :class:`llamay_core.graph.model_spec.ModelSpec`: the hyperparameters, the op graph and the
    tensors the graph reads with their expected shapes. A family never knows which backend
    will run it and never owns cache storage: attention reads and writes the engine's KV pages
    through the ``kv_write`` and ``attention`` ops.

    Return value: ignored. An architecture registered twice is reported as a plugin failure.
    """


@hookspec
def llamay_register_commands(commands: Callable[..., None]) -> None:
    """Add subcommands to the ``llamay`` command line.

    Call ``commands(name, help, configure, run)`` where ``configure(parser)`` adds arguments
    to an ``argparse.ArgumentParser`` (single-dash long flags are llamay's style, e.g.
    ``-backend``) and ``run(args) -> int`` executes the command and returns its exit code.
    Raise :class:`llamay_core.errors.LlamayError` for a user error: the CLI prints its message
    as one line and exits 2. Keep imports inside ``run`` so ``llamay --help`` stays fast.
    """
