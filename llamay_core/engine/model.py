"""A loaded model: tokenizer, compiled graph on a backend, KV pages, and the public methods."""
from __future__ import annotations

import os
import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from llamay_core.backend_api import KvSpec
from llamay_core.engine.context import Context
from llamay_core.engine.forward import Forward
from llamay_core.engine.generate import Generation
from llamay_core.engine.kv_pages import PagePool, SequenceKV
from llamay_core.engine.sampling import SamplingParams
from llamay_core.engine.split import SplitExecutable
from llamay_core.errors import ContextOverflowError, UsageError
from llamay_core.files.gguf_file import GGUFFile
from llamay_core.graph.model_spec import ModelSpec


def release_backends(backends: list[Any]) -> None:
    """Call each backend's close() (the model's, then a split's fallback)."""
    for backend in backends:
        backend.close()


class Model:
    """What `llamay.load()` returns. Created by `llamay_core.engine.loader.load_model`."""

    def __init__(self, *, gguf: GGUFFile, spec: ModelSpec, tokenizer: Any, backend_name: str, backend: Any,
                 kv_spec: KvSpec, store: Any, executable: Any, n_ctx: int, ubatch: int,
                 display_name: str) -> None:
        self.gguf = gguf
        self.spec = spec
        self.hparams = spec.hparams
        self.tokenizer = tokenizer
        self.backend_name = backend_name
        self.backend = backend
        self.kv_spec = kv_spec
        self.store = store
        self.pool = PagePool(store)
        self.executable = executable
        self.n_ctx = n_ctx
        self.forward = Forward(executable, self.pool, n_ctx=n_ctx, ubatch=ubatch)
        self.display_name = display_name
        self.prefix_cache: Any = None  # a PrefixCache when loaded with prefix_cache_mib
        self.last_stats: Any = None  # the GenerationStats of the last generate()
        backends = [backend] + ([executable.fallback_backend] if isinstance(executable, SplitExecutable) else [])
        # Runs once: on close(), or when the model is garbage-collected. Not at interpreter exit,
        # where the process ending frees device memory anyway and drivers may already be gone.
        self._release = weakref.finalize(self, release_backends, backends)
        self._release.atexit = False

    # -- lifetime -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return not self._release.alive

    def close(self) -> None:
        """Release the backend's device resources (its `close()`); the model is unusable after.

        Called again, or after garbage collection, it does nothing. `with llamay.load(...) as
        model:` closes on leaving; a model that is simply dropped is closed when collected.
        """
        self._release()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def placement(self) -> list[tuple[str, list[str]]]:
        """(backend, op names) per part of the graph: where each op runs, for reports."""
        if isinstance(self.executable, SplitExecutable):
            return self.executable.placement()
        return [(self.backend_name, [n.name for n in self.spec.graph.nodes])]

    # -- text ---------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def _prompt_ids(self, prompt: Sequence[int] | str, first: bool) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt, add_special=first, parse_special=True)
        ids = [int(i) for i in prompt]
        bad = [i for i in ids if not 0 <= i < self.hparams.n_vocab]
        if bad:
            raise UsageError(f"token id {bad[0]} is outside the vocabulary (0..{self.hparams.n_vocab - 1})")
        return ids

    def chat_prompt(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        from llamay_core.engine.chat_template import render_chat

        return render_chat(self, messages, add_generation_prompt)

    # -- compute ------------------------------------------------------------------------------
    def context(self) -> Context:
        """An empty context."""
        return Context(self, SequenceKV(self.pool))

    def restore(self, path: str | os.PathLike[str]) -> Context:
        """A context read back from a snapshot file: same tokens, same cache, no recompute."""
        from llamay_core.state.snapshot import read_snapshot

        return read_snapshot(self, path)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """One forward pass over `ids`; float32 logits at every position [len(ids), n_vocab]."""
        ids = self._prompt_ids(ids, first=True)
        if not ids:
            raise UsageError("logits() needs at least one token")
        if len(ids) > self.n_ctx:
            raise ContextOverflowError(f"{len(ids)} tokens exceed the context of {self.n_ctx}")
        seq = SequenceKV(self.pool)
        try:
            return self.forward.run(seq, ids, all_logits=True)
        finally:
            seq.release()

    def generate(self, prompt: Sequence[int] | str = "", max_tokens: int = 64, temperature: float = 0.0,
                 seed: int | None = None, stream: bool = False, *, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, repeat_penalty: float = 1.0, stop: Sequence[str] = (),
                 context: Context | None = None, ignore_eos: bool = False, speculative: Any = None,
                 json_schema: Any = None, grammar: str | None = None, regex: str | None = None) -> str | Iterator[str]:
        """Continue `prompt` (text or ids); a str, or text pieces as they come when `stream`.

        speculative: "ngram" (prompt lookup), a draft Model or its name, or a SpeculativeConfig;
        the output is the same as without it (greedy: the same tokens). json_schema (a dict, JSON
        text or a file path), grammar (GBNF or Lark text) or regex constrain the output.
        """
        if max_tokens < 1:
            raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                repeat_penalty=repeat_penalty, seed=seed)
        constraint = None
        if json_schema is not None or grammar is not None or regex is not None:
            from llamay_core.constrain.sources import constraint_from_options

            constraint = constraint_from_options(self, json_schema=json_schema, grammar=grammar, regex=regex)
        gen = self.start_generation(prompt, params, max_tokens, stop=stop, context=context, ignore_eos=ignore_eos,
                                    speculative=speculative, constraint=constraint)
        pieces = self._run(gen, context is None)
        return pieces if stream else "".join(pieces)

    def start_generation(self, prompt: Sequence[int] | str, params: SamplingParams, max_tokens: int,
                         stop: Sequence[str] = (), context: Context | None = None,
                         ignore_eos: bool = False, speculative: Any = None, constraint: Any = None) -> Generation:
        """A Generation ready to stream. speculative: as in `generate`; constraint: a
        `llamay_core.constrain` Constraint (see `constraint_from_response_format`)."""
        from llamay_core.speculative.config import speculative_config

        spec = speculative_config(speculative, self)
        ctx = context if context is not None else self.context()
        ids = self._prompt_ids(prompt, first=not ctx.tokens)
        if not ids and not ctx.tokens:
            raise UsageError("empty prompt")
        if len(ctx.tokens) + len(ids) > self.n_ctx:
            raise ContextOverflowError(f"prompt of {len(ctx.tokens) + len(ids)} tokens exceeds the context of {self.n_ctx}")
        return Generation(ctx, ids, params, max_tokens, stop=stop, ignore_eos=ignore_eos, speculative=spec,
                          constraint=constraint)

    def _run(self, gen: Generation, owns_context: bool) -> Iterator[str]:
        try:
            yield from gen.text()
        finally:
            self.last_stats = gen.stats
            if owns_context:
                gen.ctx.close()

    # -- description --------------------------------------------------------------------------
    @property
    def info(self) -> dict[str, Any]:
        hp = self.hparams
        types: dict[str, int] = {}
        for t in self.gguf.tensors.values():
            types[t.type_name] = types.get(t.type_name, 0) + 1
        return {
            "name": self.display_name,
            "path": str(self.gguf.path),
            "architecture": hp.architecture,
            "parameters": int(sum(t.n_elements for t in self.gguf.tensors.values())),
            "weights_bytes": int(sum(t.n_bytes for t in self.gguf.tensors.values())),
            "quant_types": types,
            "context_length": hp.context_length,
            "n_ctx": self.n_ctx,
            "n_layers": hp.n_layers,
            "n_embd": hp.n_embd,
            "n_heads": hp.n_heads,
            "n_kv_heads": hp.n_kv_heads,
            "n_vocab": hp.n_vocab,
            "backend": self.backend_name,
            "kv_dtype": self.kv_spec.dtype,
            "kv_bytes_per_token": self.kv_spec.bytes_per_token(),
            "page_size": self.kv_spec.page_size,
            "model_hash": self.gguf.file_hash(),
        }
