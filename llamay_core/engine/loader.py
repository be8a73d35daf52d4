"""`load()`: from a model name or path to a ready Model on a chosen backend."""
from __future__ import annotations

import os
from typing import Any

from gguf.constants import GGML_QUANT_SIZES

from llamay_core.backend_api import KV_DTYPES, KvSpec
from llamay_core.engine.model import Model
from llamay_core.errors import BackendError, ModelFileError, UsageError
from llamay_core.files.gguf_file import GGUFFile, open_gguf
from llamay_core.files.model_names import KNOWN_MODELS, resolve_model
from llamay_core.graph.model_spec import ModelSpec
from llamay_core.plugins_runtime.manager import get_registry

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


def create_backend(name: str) -> Any:
    info = get_registry().backend_info(name)
    try:
        backend = info.create()
    except ImportError as exc:
        raise BackendError(f"backend {name!r} is unavailable: {exc}") from None
    availability = backend.probe()
    if not availability.available:
        raise BackendError(f"backend {name!r} is unavailable: {availability.reason}")
    return backend


def load_model(model: str | os.PathLike[str], backend: str | None = None, n_ctx: int | None = None,
               kv_dtype: str = "f32", page_size: int = 16, ubatch: int = 256, n_seq: int = 4,
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
    if backend is None:
        from llamay_core.engine.backend_choice import choose_backend

        backend_name, backend_obj = choose_backend(gguf, spec)
    else:
        backend_name, backend_obj = backend, create_backend(backend)
    caps = backend_obj.capabilities
    check_weight_types(gguf, spec, backend_name, caps.weight_types)
    missing_ops = spec.graph.op_names() - set(caps.ops)
    if kv_dtype not in caps.kv_dtypes and not missing_ops:
        raise UsageError(f"backend {backend_name!r} does not store KV as {kv_dtype} "
                         f"(it offers {', '.join(sorted(caps.kv_dtypes))})")
    from llamay_core.tokenizer import Tokenizer

    try:
        tokenizer = Tokenizer.from_metadata(gguf.metadata)
    except (ValueError, KeyError) as exc:
        raise ModelFileError(path, f"tokenizer: {exc}") from None
    pages_per_seq = -(-ctx // page_size)
    kv_spec = KvSpec(n_layers=hp.n_layers, n_kv_heads=hp.n_kv_heads, key_dim=hp.key_dim, value_dim=hp.value_dim,
                     page_size=page_size, max_pages=pages_per_seq * max(n_seq, 1) + 64, dtype=kv_dtype)
    if missing_ops:  # the ops it lacks run on a fallback backend (engine/split.py)
        from llamay_core.engine.split import compile_split

        store, executable = compile_split(spec.graph, gguf.tensors, kv_spec, backend_name, backend_obj, create_backend)
    else:
        weights = backend_obj.load_weights({n: gguf.tensors[n] for n in spec.graph.weight_names()})
        store = backend_obj.kv_store(kv_spec)
        executable = backend_obj.compile(spec.graph, weights, store)
    display = spec_text if spec_text in KNOWN_MODELS else str(gguf.metadata.get("general.name") or path.stem)
    m = Model(gguf=gguf, spec=spec, tokenizer=tokenizer, backend_name=backend_name, backend=backend_obj,
              kv_spec=kv_spec, store=store, executable=executable, n_ctx=ctx,
              ubatch=min(ubatch, caps.max_tokens_per_pass), display_name=display)
    if prefix_cache_mib:
        from llamay_core.state.prefix_cache import PrefixCache

        m.prefix_cache = PrefixCache(m.pool, budget_bytes=int(prefix_cache_mib * 2**20))
    return m
