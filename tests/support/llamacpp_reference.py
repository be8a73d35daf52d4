"""llama.cpp as the family tests' reference: per-position logits of a token list and chat-template
rendering, through whichever binding is installed.

llama-cpp-py-sync (the `test` extra: a prebuilt wheel, CFFI over llama.cpp's own C API) comes
first; llama-cpp-python (the `dev` extra, built from source) is the fallback. Both decode one
batch of every position with every output requested into an f32 KV cache, so the comparison sees
llama.cpp's model code rather than a cache format.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from llamay_core.host_info import usable_cores
from tests.support import glibc_compat

GGML_TYPE_F32 = 0


def _import(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_SYNC = _import("llama_cpp_py_sync")
_PYTHON = None if _SYNC is not None else _import("llama_cpp")

if _SYNC is not None:
    BINDING = f"llama-cpp-py-sync {_SYNC.__version__} (llama.cpp {_SYNC.__llama_cpp_tag__})"
elif _PYTHON is not None:
    BINDING = f"llama-cpp-python {_PYTHON.__version__}"
else:
    BINDING = None
MISSING = "neither llama-cpp-py-sync nor llama-cpp-python is installed (pip install -e '.[test]')"


def _threads() -> int:
    return usable_cores()


class _SyncModel:
    """A model and one context through llama-cpp-py-sync's cffi `lib` (the llama.h C API)."""

    def __init__(self, path: Path, n_ctx: int) -> None:
        self._ffi, lib, _ = _sync_library()
        self._lib = lib
        lib.llama_log_set(_sync_quiet_logger(self._ffi), self._ffi.NULL)
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self._model = lib.llama_model_load_from_file(str(path).encode(), params)
        if self._model == self._ffi.NULL:
            raise RuntimeError(f"llama.cpp could not load {path}")
        ctx = lib.llama_context_default_params()
        ctx.n_ctx = ctx.n_batch = ctx.n_ubatch = n_ctx
        ctx.n_seq_max = 1
        ctx.n_threads = ctx.n_threads_batch = _threads()
        ctx.type_k = ctx.type_v = GGML_TYPE_F32
        ctx.flash_attn_type = 0
        ctx.embeddings = False
        self._ctx = lib.llama_init_from_model(self._model, ctx)
        if self._ctx == self._ffi.NULL:
            lib.llama_model_free(self._model)
            raise RuntimeError(f"llama.cpp could not make a context for {path}")
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))

    def logits(self, ids: list[int]) -> np.ndarray:
        lib = self._lib
        lib.llama_memory_clear(lib.llama_get_memory(self._ctx), True)
        batch = lib.llama_batch_init(len(ids), 0, 1)
        try:
            batch.n_tokens = len(ids)
            for i, token in enumerate(ids):
                batch.token[i] = token
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            rc = lib.llama_decode(self._ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
        finally:
            lib.llama_batch_free(batch)
        rows = [np.frombuffer(self._ffi.buffer(lib.llama_get_logits_ith(self._ctx, i), 4 * self.n_vocab), np.float32)
                for i in range(len(ids))]
        return np.array(rows, np.float64)

    def close(self) -> None:
        self._lib.llama_free(self._ctx)
        self._lib.llama_model_free(self._model)


@functools.cache
def _sync_library() -> tuple[Any, Any, tempfile.TemporaryDirectory | None]:
    """llama-cpp-py-sync's ffi and its libllama; on a glibc older than the one the wheel was
    linked against (2.38), a copy of its libraries that imports the pre-C23 parse functions
    (see glibc_compat), whose folder the cache keeps for as long as the process runs."""
    from llama_cpp_py_sync._cffi_bindings import get_ffi, get_lib
    ffi = get_ffi()
    try:
        return ffi, get_lib(), None
    except RuntimeError as error:
        if "GLIBC_2.38" not in str(error):
            raise
    copy = tempfile.TemporaryDirectory(prefix="llamay-llamacpp-")
    directory = glibc_compat.patched_copy(Path(_SYNC.__file__).parent, Path(copy.name))
    return ffi, ffi.dlopen(str(directory / "libllama.so")), copy


@functools.cache
def _sync_quiet_logger(ffi: Any) -> Any:
    """llama.cpp logs every load to stderr; this callback drops it. Made once and kept: a cffi
    callback must outlive every call that may log."""
    return ffi.callback("ggml_log_callback", lambda level, text, user: None)


class _PythonModel:
    """The same through llama-cpp-python's Llama (logits_all keeps every position's row)."""

    def __init__(self, path: Path, n_ctx: int) -> None:
        self._llm = _PYTHON.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                                  type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, n_threads=_threads(), verbose=False)

    def logits(self, ids: list[int]) -> np.ndarray:
        self._llm.reset()
        self._llm.eval(ids)
        return np.array(self._llm.scores[:len(ids)], np.float64)

    def close(self) -> None:
        self._llm.close()


class LlamaCpp:
    """A GGUF loaded in llama.cpp with an f32 KV cache of `n_ctx` positions, decoded in one batch."""

    def __init__(self, path: Path, n_ctx: int = 512) -> None:
        if BINDING is None:
            raise RuntimeError(MISSING)
        self.n_ctx = n_ctx
        self._impl = _SyncModel(path, n_ctx) if _SYNC is not None else _PythonModel(path, n_ctx)

    def logits(self, ids: list[int]) -> np.ndarray:
        """Every position's logits (len(ids), n_vocab), float64, from an empty cache."""
        if not 0 < len(ids) <= self.n_ctx:
            raise ValueError(f"{len(ids)} tokens for a context of {self.n_ctx}")
        return self._impl.logits(ids)

    def close(self) -> None:
        self._impl.close()

    def __enter__(self) -> LlamaCpp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def render_chat(template: str, messages: list[dict[str, str]], add_assistant: bool) -> str:
    """llama_chat_apply_template: llama.cpp detects the family by the template's markers and
    renders its own format of `messages`."""
    if BINDING is None:
        raise RuntimeError(MISSING)
    size = 8192
    if _SYNC is not None:
        ffi, lib, _ = _sync_library()
        keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
        chat = ffi.new("llama_chat_message[]", len(messages))
        for slot, (role, content) in zip(chat, keep):
            slot.role, slot.content = role, content
        buf = ffi.new("char[]", size)
        n = lib.llama_chat_apply_template(template.encode(), chat, len(messages), add_assistant, buf, size)
        out = ffi.buffer(buf, max(n, 0))[:]
    else:
        chat = (_PYTHON.llama_chat_message * len(messages))(
            *[_PYTHON.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages])
        buf = ctypes.create_string_buffer(size)
        n = _PYTHON.llama_chat_apply_template(template.encode(), chat, len(messages), add_assistant, buf, size)
        out = buf.raw[:max(n, 0)]
    if not 0 < n <= size:
        raise RuntimeError(f"llama_chat_apply_template returned {n} (template not recognised?)")
    return out.decode()
