"""What the routes need from an engine, and `LocalEngine`: that interface over a model in this process.

The routes (routes.py) never touch a Model or the Scheduler: they tokenize, submit a
`GenerationRequest`, relay its events and read descriptions through `Engine`. A second
implementation (one forwarding to remote replicas) serves the same routes unchanged.
Requests carry data only (token ids, settings, a constraint's source text or schema), so they can
cross a process boundary.
"""
from __future__ import annotations

import asyncio
import re
import secrets
import threading
from typing import Any, AsyncIterator, Mapping, Protocol, Sequence

import attrs

from llamay_core.engine.sampling import SamplingParams
from llamay_core.errors import LlamayError
from llamay_core.server.scheduler import Event, Finished, Job, Scheduler, SchedulerFull


class EngineBusy(Exception):
    """No room for another request now (answered 503 with Retry-After)."""


class EngineRejected(Exception):
    """The engine refused the request as given (answered 400), e.g. a grammar that does not compile."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@attrs.frozen
class ConstraintSpec:
    """A constraint as data: kind json_schema (a dict), grammar (GBNF/Lark text) or regex."""

    kind: str
    source: Any


@attrs.frozen
class GenerationRequest:
    """One sequence to generate: tokenized prompt and settings, all plain data."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    max_tokens: int
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # None: none; N: the chosen token's logprob plus N alternatives
    ignore_eos: bool = False
    constraint: ConstraintSpec | None = None
    logit_bias: Mapping[int, float] = attrs.field(factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    post_sampling_probs: bool = False  # logprobs of the distribution drawn from, not the raw logits


@attrs.frozen
class ModelInfo:
    """What /v1/models, /props and /health say about the served model."""

    names: tuple[str, ...]  # the id first, then aliases
    n_ctx: int
    n_ctx_train: int
    n_vocab: int
    n_embd: int
    n_params: int
    size: int
    path: str
    architecture: str
    chat_template: str
    bos_token: str
    eos_token: str
    total_slots: int
    backend: str
    device: str
    gpu: bool
    max_token_bytes: int = 1 << 10  # the longest token's text: a text this many times n_ctx bytes cannot fit


class RequestStream(Protocol):
    """The events of one submitted request: `Delta`s, then one `Finished`."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    def cancel(self) -> None: ...


class Engine(Protocol):
    """The engine-facing interface of the routes."""

    info: ModelInfo

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def token_bytes(self, token: int) -> bytes: ...

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> str: ...

    def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...

    async def submit(self, request: GenerationRequest) -> RequestStream: ...

    def health(self) -> dict[str, Any]: ...

    def slots(self) -> list[dict[str, Any]]: ...

    def metrics(self) -> bytes: ...


class _Relay:
    """Carries a job's events from the scheduler thread into the event loop of the request."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.scheduler = scheduler
        self.job: Job | None = None

    def notify(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self.queue.get()
            yield event
            if isinstance(event, Finished):
                return

    def cancel(self) -> None:
        if self.job is not None:
            self.scheduler.cancel(self.job)


class LocalEngine:
    """`Engine` over a Model and its Scheduler in this process."""

    def __init__(self, model: Any, scheduler: Scheduler, names: Sequence[str], device: str, gpu: bool) -> None:
        self.model = model
        self.scheduler = scheduler
        self.metrics_registry = scheduler.metrics
        self._compile_lock = threading.Lock()
        meta = model.gguf.metadata
        tok = model.tokenizer
        self.info = ModelInfo(
            names=tuple(names), n_ctx=model.n_ctx, n_ctx_train=int(model.hparams.context_length),
            n_vocab=int(model.hparams.n_vocab), n_embd=int(getattr(model.hparams, "n_embd", 0) or 0),
            n_params=sum(int(t.n_elements) for t in model.gguf.tensors.values()),
            size=sum(int(t.data.nbytes) for t in model.gguf.tensors.values()),
            path=str(getattr(model.gguf, "path", "")), architecture=str(meta.get("general.architecture", "")),
            chat_template=str(meta.get("tokenizer.chat_template") or ""),
            bos_token=tok.decode([tok.bos_id]) if tok.bos_id is not None and tok.bos_id >= 0 else "",
            eos_token=tok.decode([tok.eos_id]) if tok.eos_id is not None and tok.eos_id >= 0 else "",
            total_slots=scheduler.max_running, backend=model.backend_name, device=device, gpu=gpu,
            max_token_bytes=max(1, max(len(tok.token_bytes(i)) for i in range(tok.n_vocab))))

    # -- text -------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return self.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.model.detokenize(ids)

    def token_bytes(self, token: int) -> bytes:
        return self.model.tokenizer.token_bytes(token)

    def _render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        try:
            return self.model.chat_prompt([dict(m) for m in messages])
        except LlamayError as exc:
            raise EngineRejected(str(exc), "messages") from None

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The prompt text; a last assistant message is a prefill the answer continues (as llama-server)."""
        head, prefill = _split_prefill(messages)
        return self._render(head) + prefill

    def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The chat prompt's ids: the template's markers are special tokens, message contents are
        tokenized as plain text (a user's "<|im_end|>" stays text and cannot end their turn)."""
        head, prefill = _split_prefill(messages)
        rendered = self._render(head)
        nonce = secrets.token_hex(8)
        masked = self._render([{**m, "content": f"\ue000{nonce}.{i}\ue001"} for i, m in enumerate(head)])
        marks = re.compile(f"\ue000{nonce}\\.(\\d+)\ue001")
        contents = [str(m.get("content") or "") for m in head]
        parts = _split_marked(masked, marks, contents)
        if "".join(t for t, _ in parts) != rendered:
            # The template changed the contents (trimmed them, say): keep its change where it is a strip.
            stripped = _split_marked(masked, marks, [c.strip() for c in contents])
            if "".join(t for t, _ in stripped) == rendered:
                parts = stripped
        tok = self.model.tokenizer
        # The template's own markers (and the end-of-generation tokens) never come from content,
        # even where the vocabulary marks them user-defined rather than control. Whitespace
        # tokens (gemma's "\n") mark nothing and keep matching as llama.cpp matches them.
        markers = set(tok.eog_ids)
        for text, special in parts:
            if special:
                markers |= {t for t in tok.special_tokens_in(text) if tok.token_text(t).strip()}
        return tok.encode_parts(parts + [(prefill, False)], add_special=True, literal=frozenset(markers))

    # -- generation -------------------------------------------------------------------------------
    def _compile(self, spec: ConstraintSpec) -> Any:
        with self._compile_lock:  # the compiled-grammar cache is shared
            return compile_constraint(self.model, spec)

    async def submit(self, request: GenerationRequest) -> _Relay:
        from llamay_core.server.logit_adjust import LogitAdjust

        constraint = None
        if request.constraint is not None:
            constraint = await asyncio.to_thread(self._compile, request.constraint)
        relay = _Relay(self.scheduler)
        adjust = LogitAdjust.build(request.logit_bias, request.presence_penalty, request.frequency_penalty)
        job = Job(request.prompt_ids, request.params, request.max_tokens, relay.notify, stop=request.stop,
                  logprobs=request.logprobs, ignore_eos=request.ignore_eos, constraint=constraint, adjust=adjust,
                  post_sampling=request.post_sampling_probs, constraint_spec=request.constraint)
        try:
            self.scheduler.submit(job)
        except SchedulerFull as exc:
            raise EngineBusy(str(exc)) from None
        relay.job = job
        return relay

    # -- state ------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        s, m = self.scheduler, self.model
        return {
            "ok": s.alive, "failure": s.failure, "queue_depth": s.queue_depth, "running": s.n_running,
            "kv_pages_used": m.pool.pages_in_use, "kv_pages_total": m.pool.capacity,
        }

    def slots(self) -> list[dict[str, Any]]:
        busy = self.scheduler.n_running
        return [{"id": i, "n_ctx": self.model.n_ctx, "is_processing": i < busy}
                for i in range(self.scheduler.max_running)]

    def metrics(self) -> bytes:
        return self.metrics_registry.render()


def compile_constraint(model: Any, spec: ConstraintSpec) -> Any:
    """A fresh matcher for `spec` on `model`'s vocabulary; EngineRejected (a 400) when it does not compile.

    Callers serialize calls per model: the compiled-grammar cache behind it is not thread-safe.
    """
    from llamay_core.constrain.sources import grammar_for

    try:
        return grammar_for(model, spec.kind, spec.source).start()
    except (LlamayError, RecursionError, ValueError, TypeError) as exc:
        raise EngineRejected(f"{spec.kind}: {exc}", spec.kind) from None


def _split_prefill(messages: Sequence[Mapping[str, Any]]) -> tuple[Sequence[Mapping[str, Any]], str]:
    if len(messages) > 1 and messages[-1].get("role") == "assistant":
        return messages[:-1], str(messages[-1].get("content") or "")
    return messages, ""


def _split_marked(masked: str, marks: re.Pattern[str], contents: Sequence[str]) -> list[tuple[str, bool]]:
    """`masked` cut at the marks: template text (special tokens parsed) and contents (plain text)."""
    parts: list[tuple[str, bool]] = []
    pos = 0
    for hit in marks.finditer(masked):
        parts.append((masked[pos:hit.start()], True))
        parts.append((contents[int(hit.group(1))], False))
        pos = hit.end()
    parts.append((masked[pos:], True))
    return [(t, special) for t, special in parts if t]
