"""`load()`: from a model name or path to a ready Model on a chosen backend."""
from __future__ import annotations

import os
from typing import Any, Callable

import attrs
from gguf.constants import GGML_QUANT_SIZES

from llamay_core.backend_api import KV_DTYPES, KvSpec, adopt_defaults, missing_members
from llamay_core.engine.model import Model
from llamay_core.engine.pass_size import DEFAULT_UBATCH
from llamay_core.errors import BackendError, BackendFailure, LlamayError, ModelFileError, UsageError, one_line
from llamay_core.files.gguf_file import GGUFFile, open_gguf
from llamay_core.files.model_names import KNOWN_MODELS, resolve_model
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.progress import slow_step

DEFAULT_CTX = 4096


def build_spec(gguf: GGUFFile) -> ModelSpec:
    """Ask the family registered for the file's architecture to build the graph, then check it."""
    registry = get_registry()
    arch = gguf.architecture
    if not arch:
        raise ModelFileError(gguf.path, "no general.architecture in the metadata")
    family = registry.families.get(arch)
    if family is None:
        known = ", ".join(sorted(registry.families)) or "none"
        raise ModelFileError(gguf.path, f"unsupported architecture {arch!r} (supported: {known})")
    spec = family.build(gguf)
    check_tensors(gguf, spec)
    return spec


def check_tensors(gguf: GGUFFile, spec: ModelSpec) -> None:
    """Every tensor the family reads is there with its shape, and the file holds no other:
    a tensor nobody reads means the family does not implement part of the model (llama.cpp
    refuses such files too), so running it would be silently wrong."""
    unused = sorted(set(gguf.tensors) - set(spec.tensor_shapes))
    if unused:
        more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
        raise ModelFileError(gguf.path, f"tensor {unused[0]}{more} not used by the {gguf.architecture} family "
                                        f"(refusing rather than computing a different model)")
    for name, shape in spec.tensor_shapes.items():
        t = gguf.tensors.get(name)
        if t is None:
            raise ModelFileError(gguf.path, f"missing tensor {name}")
        if tuple(t.shape) != tuple(shape):
            raise ModelFileError(gguf.path, f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
        block = GGML_QUANT_SIZES[t.ggml_type][0]
        if shape and shape[-1] % block:
            raise ModelFileError(gguf.path, f"tensor {name}: row of {shape[-1]} is not a whole number of {t.type_name} blocks")


def check_weight_types(gguf: GGUFFile, spec: ModelSpec, backend_name: str, weight_types: frozenset[str]) -> None:
    for name in spec.graph.weight_names():
        t = gguf.tensors[name]
        if t.type_name not in weight_types:
            raise ModelFileError(gguf.path, f"unsupported tensor type {t.type_name} for {name} "
                                            f"(backend {backend_name} reads {', '.join(sorted(weight_types))})")


def backend_step(backend_name: str, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a backend's `fn`; anything it raises becomes a one-line BackendFailure naming the step."""
    try:
        return fn(*args)
    except LlamayError:
        raise
    except Exception as exc:  # a backend's bug must reach the user as one line, not a traceback
        raise BackendFailure(backend_name, stage, exc) from exc


def check_contract(name: str, backend: Any) -> None:
    """Refuse, in one line, a backend object that lacks required members of the contract; optional
    members it lacks get `BackendBase`'s defaults."""
    adopt_defaults(backend)
    missing = missing_members(backend)
    if missing:
        raise BackendError(f"backend {name!r} does not implement the contract: it lacks {', '.join(missing)} "
                           "(subclass llamay_core.backend_api.BackendBase for the optional ones)")


def reference_name() -> str:
    """The registered backend that declares itself the reference (`Capabilities.is_reference`).

    Lowest priority first: the reference is meant to lose every tie, so it comes early.
    """
    for info in sorted(get_registry().backends.values(), key=lambda b: (b.priority, b.name)):
        try:
            if info.create().capabilities.is_reference:
                return info.name
        except Exception:  # a backend that cannot even be created is not the reference
            continue
    raise BackendError("no reference backend is installed (one declaring Capabilities.is_reference)")


def create_backend(name: str) -> Any:
    """The named backend, created and probed; unavailable or broken ones raise a one-line error."""
    info = get_registry().backend_info(name)
    try:
        backend = info.create()
    except Exception as exc:  # ImportError from a missing driver package, or a broken plugin
        raise BackendError(f"backend {name!r} is unavailable: {one_line(exc)}") from exc
    check_contract(name, backend)
    availability = backend_step(name, "probe", backend.probe)
    if not availability.available:
        raise BackendError(f"backend {name!r} is unavailable: {availability.reason}")
    return backend


@attrs.frozen
class ModelBuild:
    """Everything `load()` settles before a backend is chosen; `on()` finishes the Model."""

    gguf: GGUFFile
    spec: ModelSpec
    tokenizer: Any
    kv_spec: KvSpec
    n_ctx: int
    ubatch: int
    display_name: str
    prefix_cache_mib: float | None = None

    def usable_on(self, backend: Any) -> str:
        """Why `backend` cannot run this model as asked ("" when it can), without running anything."""
        caps = backend.capabilities
        missing_ops = self.spec.graph.op_names() - set(caps.ops)
        if missing_ops:
            return f"lacks ops {', '.join(sorted(missing_ops))}"
        odd = sorted({self.gguf.tensors[n].type_name for n in self.spec.graph.weight_names()} - set(caps.weight_types))
        if odd:
            return f"does not read {', '.join(odd)} weights"
        if self.kv_spec.dtype not in caps.kv_dtypes:
            return f"does not store KV as {self.kv_spec.dtype}"
        return ""

    def on(self, backend_name: str, backend: Any) -> Model:
        """Load the weights on `backend`, compile the graph, and wrap it all in a Model."""
        caps = backend.capabilities
        check_weight_types(self.gguf, self.spec, backend_name, caps.weight_types)
        missing_ops = self.spec.graph.op_names() - set(caps.ops)
        if self.kv_spec.dtype not in caps.kv_dtypes and not missing_ops:
            raise UsageError(f"backend {backend_name!r} does not store KV as {self.kv_spec.dtype} "
                             f"(it offers {', '.join(sorted(caps.kv_dtypes))})")
        if missing_ops:  # the ops it lacks run on a fallback backend (engine/split.py)
            from llamay_core.engine.split import compile_split

            with slow_step("compiling kernels (one time)"):
                store, executable = backend_step(backend_name, "compile", compile_split, self.spec.graph,
                                                 self.gguf.tensors, self.kv_spec, backend_name, backend,
                                                 create_backend)
        else:
            weights = backend_step(backend_name, "load_weights", backend.load_weights,
                                   {n: self.gguf.tensors[n] for n in self.spec.graph.weight_names()})
            store = backend_step(backend_name, "kv_store", backend.kv_store, self.kv_spec)
            with slow_step("compiling kernels (one time)"):
                executable = backend_step(backend_name, "compile", backend.compile, self.spec.graph, weights, store)
        m = Model(gguf=self.gguf, spec=self.spec, tokenizer=self.tokenizer, backend_name=backend_name,
                  backend=backend, kv_spec=self.kv_spec, store=store, executable=executable, n_ctx=self.n_ctx,
                  ubatch=min(self.ubatch, caps.max_tokens_per_pass), display_name=self.display_name)
        if self.prefix_cache_mib:
            from llamay_core.state.prefix_cache import PrefixCache

            m.prefix_cache = PrefixCache(m.pool, budget_bytes=int(self.prefix_cache_mib * 2**20))
        return m


def load_model(model: str | os.PathLike[str], backend: str | None = None, n_ctx: int | None = None,
               kv_dtype: str = "f32", page_size: int = 16, ubatch: int = DEFAULT_UBATCH, n_seq: int = 4,
               prefix_cache_mib: float | None = None) -> Model:
    """Load MODEL (path or name) on BACKEND (None: the best trusted backend available here)."""
    if kv_dtype not in KV_DTYPES:
        raise UsageError(f"unknown KV dtype {kv_dtype!r} (choose from {', '.join(KV_DTYPES)})")
    if page_size < 1 or ubatch < 1:
        raise UsageError("page size and ubatch must be >= 1")
    spec_text = os.fspath(model)
    path = resolve_model(spec_text)
    gguf = open_gguf(path)
    spec = build_spec(gguf)
    hp = spec.hparams
    ctx = min(DEFAULT_CTX, hp.context_length) if n_ctx is None else n_ctx
    if ctx < 1:
        raise UsageError(f"context size must be >= 1, got {ctx}")
    from llamay_core.tokenizer import Tokenizer

    try:
        tokenizer = Tokenizer.from_metadata(gguf.metadata)
    except (ValueError, KeyError) as exc:
        raise ModelFileError(path, f"tokenizer: {exc}") from None
    pages_per_seq = -(-ctx // page_size)
    kv_spec = KvSpec(n_layers=hp.n_layers, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim, value_dim=hp.value_dim,
                     page_size=page_size, max_pages=pages_per_seq * max(n_seq, 1) + 64, dtype=kv_dtype)
    display = spec_text if spec_text in KNOWN_MODELS else str(gguf.metadata.get("general.name") or path.stem)
    build = ModelBuild(gguf=gguf, spec=spec, tokenizer=tokenizer, kv_spec=kv_spec, n_ctx=ctx, ubatch=ubatch,
                       display_name=display, prefix_cache_mib=prefix_cache_mib)
    if backend is None:
        from llamay_core.engine.backend_choice import load_on_best_backend

        return load_on_best_backend(build)
    return build.on(backend, create_backend(backend))
