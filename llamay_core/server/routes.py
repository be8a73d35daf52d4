"""Every route handler of `llamay serve`: OpenAI's API, llama-server's native API, Anthropic's
Messages API and the service endpoints.

Handlers run on the event loop and reach the model only through `Engine` (engine_api.py): they
validate, tokenize, submit `GenerationRequest`s and relay their events. So the same handlers
serve a model in this process or one behind remote replicas. Work that grows with the input
(tokenizing, rendering the chat template) runs in a worker thread, so one large request never
stalls the loop that answers everyone else.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator, Callable, Sequence

import attrs
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamay_core.engine.sampling import SamplingParams
from llamay_core.server import anthropic_api as anth
from llamay_core.server import llama_api as native
from llamay_core.server import openai_format as fmt
from llamay_core.server.engine_api import Engine, EngineBusy, EngineRejected, GenerationRequest, RequestStream
from llamay_core.server.scheduler import Delta, Event, Finished, Timings, TokenLogprob, Usage
from llamay_core.server.schemas import (
    ApiError,
    Generation,
    boolean,
    check_model,
    is_int,
    parse_json,
    parse_messages,
    parse_request,
    type_error,
    value_error,
)
from llamay_core.server.sse import DONE, EventStreamResponse, sse_data, watch_disconnect
from llamay_core.version import __version__


LARGE_BODY_BYTES = 64 * 1024


@attrs.define
class ServerState:
    """What every handler needs: the engine and the server's settings."""

    engine: Engine
    strict_model: bool = False
    max_body_bytes: int = 1 << 20
    read_timeout_s: float = 30.0
    retry_after_s: int = 1
    created: int = attrs.field(factory=lambda: int(time.time()))


def state(request: Request) -> ServerState:
    return request.app.state.llamay


# -- reading requests ---------------------------------------------------------------------------
async def read_json(request: Request) -> dict[str, Any]:
    """The body as a checked JSON object: size-limited, and 408 when it does not arrive in time."""
    s = state(request)
    limit = s.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes exceeds the limit of {limit}", code="body_too_large")
    parts, size = [], 0
    try:
        async with asyncio.timeout(s.read_timeout_s):
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise ApiError(413, f"request body exceeds the limit of {limit} bytes", code="body_too_large")
                parts.append(part)
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {s.read_timeout_s:g} s",
                       code="request_timeout", headers={"Connection": "close"}) from None
    except ClientDisconnect:  # nobody will read the answer; this just ends the request quietly
        raise ApiError(400, "the client went away before sending the whole body") from None
    raw = b"".join(parts)
    # Checking a large body takes milliseconds: off the loop, where it delays nobody else.
    return await asyncio.to_thread(parse_json, raw) if len(raw) > LARGE_BODY_BYTES else parse_json(raw)


def prompt_ids(s: ServerState, prompt: str | list[Any], param: str = "prompt") -> list[int]:
    """A raw prompt's ids (its special-token text is parsed, as llama-server does for prompts);
    text inside a mixed list joins the ids without another BOS."""
    engine, info = s.engine, s.engine.info
    check_size(s, prompt if isinstance(prompt, str) else "".join(p for p in prompt if isinstance(p, str)), param)
    if isinstance(prompt, str):
        ids = engine.tokenize(prompt, True, True)
    else:
        ids = []
        for piece in prompt:
            ids.extend([piece] if is_int(piece) else engine.tokenize(piece, False, True))
    bad = [i for i in ids if not 0 <= i < info.n_vocab]
    if bad:
        raise value_error(param, f"has token id {bad[0]}, outside the vocabulary (0..{info.n_vocab - 1})")
    return check_length(s, ids, param)


def check_size(s: ServerState, text: str, param: str) -> None:
    """Refuse, before tokenizing it, a text too long to fit whatever its tokens (no token is longer
    than `max_token_bytes`), so a huge prompt costs no tokenizer time."""
    info = s.engine.info
    if len(text) > info.n_ctx * info.max_token_bytes:  # characters <= UTF-8 bytes
        n_bytes = len(text.encode("utf-8", "surrogatepass"))
        if n_bytes > info.n_ctx * info.max_token_bytes:
            raise ApiError(400, f"the request exceeds the available context size: {n_bytes} bytes of text "
                                f"cannot fit in {info.n_ctx} tokens", param=param, code="context_length_exceeded")


def check_length(s: ServerState, ids: list[int], param: str) -> list[int]:
    n_ctx = s.engine.info.n_ctx
    if not ids:
        raise value_error(param, "is empty")
    if len(ids) >= n_ctx:
        raise ApiError(400, f"the request exceeds the available context size: the prompt has {len(ids)} tokens "
                            f"and the context holds {n_ctx} (leave room for at least one generated token)",
                       param=param, code="context_length_exceeded")
    return ids


def chat_ids(s: ServerState, messages: Sequence[dict[str, Any]]) -> list[int]:
    check_size(s, "".join(str(m.get("content") or "") for m in messages), "messages")
    try:
        ids = s.engine.chat_ids(messages)
    except EngineRejected as exc:
        raise value_error("messages", f": {exc}") from None
    return check_length(s, ids, "messages")


def tokenizer_of(s: ServerState) -> Callable[[str], list[int]]:
    return lambda t: s.engine.tokenize(t, False, True)


# -- running requests ---------------------------------------------------------------------------
def build(gen: Generation, ids: list[int], max_tokens: int | None, logprobs: int | None, index: int,
          n_ctx: int, post_sampling: bool = False) -> GenerationRequest:
    seed = gen.seed if gen.seed is None or index == 0 else (gen.seed + index) % 2**64
    params = SamplingParams(temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p, min_p=gen.min_p,
                            repeat_penalty=gen.repeat_penalty, repeat_last_n=gen.repeat_last_n, seed=seed)
    return GenerationRequest(tuple(ids), params, n_ctx if max_tokens is None else max_tokens, stop=gen.stop,
                             logprobs=logprobs, ignore_eos=gen.ignore_eos, constraint=gen.constraint,
                             logit_bias=gen.logit_bias, presence_penalty=gen.presence_penalty,
                             frequency_penalty=gen.frequency_penalty, post_sampling_probs=post_sampling)


class _Nothing:
    """The stream of a request for zero tokens (llama-server's n_predict 0): it ends at once."""

    def __init__(self, n_prompt: int) -> None:
        self.n_prompt = n_prompt

    async def __aiter__(self) -> AsyncIterator[Event]:
        yield Finished("length", Usage(self.n_prompt, 0, 0), stop_type="limit")

    def cancel(self) -> None:
        pass


async def submit_all(s: ServerState, requests: list[GenerationRequest]) -> list[RequestStream]:
    """Submit every choice of a request, or none (503 when the server is full, 400 when refused)."""
    streams: list[RequestStream] = []
    try:
        for r in requests:
            streams.append(_Nothing(len(r.prompt_ids)) if r.max_tokens == 0 else await s.engine.submit(r))
    except EngineBusy as exc:
        for st in streams:
            st.cancel()
        raise ApiError(503, f"server busy: {exc}; retry later", type="server_error", code="server_busy",
                       headers={"Retry-After": str(s.retry_after_s)}) from None
    except EngineRejected as exc:
        for st in streams:
            st.cancel()
        raise ApiError(400, str(exc), param=exc.param, code="invalid_value") from None
    return streams


async def merged(streams: list[RequestStream]) -> AsyncIterator[tuple[int, Event]]:
    """Events of several streams as they come, tagged with the stream's index."""
    if len(streams) == 1:
        async for event in streams[0]:
            yield 0, event
        return
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    async def pump(i: int, st: RequestStream) -> None:
        async for event in st:
            await queue.put((i, event))

    tasks = [asyncio.create_task(pump(i, st)) for i, st in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            i, event = await queue.get()
            yield i, event
            if isinstance(event, Finished):
                left -= 1
    finally:
        for t in tasks:
            t.cancel()


@attrs.define
class Outcome:
    """One choice's whole answer, collected from its events."""

    text: list[str] = attrs.field(factory=list)
    tokens: list[int] = attrs.field(factory=list)
    logprobs: list[TokenLogprob] = attrs.field(factory=list)
    end: Finished | None = None


def cancel_all(streams: list[RequestStream]) -> Callable[[], None]:
    def cancel() -> None:
        for st in streams:
            st.cancel()
    return cancel


async def collect(request: Request, streams: list[RequestStream]) -> list[Outcome]:
    """Every choice's whole answer; a client that leaves cancels them; a failed one is a 500."""
    outcomes = [Outcome() for _ in streams]
    watcher = asyncio.create_task(watch_disconnect(request.receive, cancel_all(streams)))
    try:
        async for i, event in merged(streams):
            o = outcomes[i]
            if isinstance(event, Delta):
                o.text.append(event.text)
                o.tokens.extend(event.tokens)
                o.logprobs.extend(event.logprobs)
            else:
                o.end = event
    finally:
        watcher.cancel()
    for o in outcomes:
        assert o.end is not None
        if o.end.reason == "error":
            cancel_all(streams)()
            raise generation_failed(o.end)
    return outcomes


def generation_failed(end: Finished) -> ApiError:
    if end.client_error:
        return ApiError(400, f"generation stopped: {end.error}", code="invalid_request")
    return ApiError(500, f"generation failed: {end.error}", type="server_error", code="internal_error")


def usage_of(outcomes: list[Outcome], n: int) -> Usage:
    """Usage of a request: each distinct prompt counted once, every choice's tokens."""
    firsts = [o.end for o in outcomes[::n]]
    return Usage(prompt_tokens=sum(e.usage.prompt_tokens for e in firsts),
                 completion_tokens=sum(o.end.usage.completion_tokens for o in outcomes),
                 cached_tokens=sum(e.usage.cached_tokens for e in firsts))


# -- OpenAI -------------------------------------------------------------------------------------
async def completions(request: Request) -> Response:
    return await openai_generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await openai_generate(request, chat=True)


async def openai_generate(request: Request, chat: bool) -> Response:
    s = state(request)
    body = await read_json(request)
    info = s.engine.info
    model = check_model(body, info.names, s.strict_model)

    def prepare() -> tuple[Any, list[list[int]]]:
        req = parse_request(body, chat, info.n_vocab, tokenizer_of(s))
        return req, [chat_ids(s, req.messages)] if chat else [prompt_ids(s, p) for p in req.prompts]

    req, prompts = await asyncio.to_thread(prepare)
    streams = await submit_all(s, [build(req.gen, ids, req.max_tokens, req.logprobs, j, info.n_ctx)
                                   for ids in prompts for j in range(req.n)])
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    if req.stream:
        clock = LiveTimings([len(ids) for ids in prompts for _ in range(req.n)])
        return EventStreamResponse(_openai_stream(streams, req, rid, created, model, clock), cancel_all(streams))
    outcomes = await collect(request, streams)
    choices = []
    for i, o in enumerate(outcomes):
        lp = fmt.LogprobsBuilder(chat).shape(o.logprobs) if req.logprobs is not None else None
        choices.append(fmt.choice_body(i, chat, "".join(o.text), o.end.reason, lp))
    return JSONResponse(fmt.completion_body(rid, created, model, chat, choices, usage_of(outcomes, req.n),
                                            outcomes[0].end.timings))


class LiveTimings:
    """`timings_per_token`: llama-server's timings while a stream runs (prompt counted whole)."""

    def __init__(self, prompt_lengths: list[int]) -> None:
        self.start = time.perf_counter()
        self.prompt = prompt_lengths
        self.first = [0.0] * len(prompt_lengths)
        self.tokens = [0] * len(prompt_lengths)

    def count(self, i: int, n_tokens: int) -> None:
        if not self.first[i]:
            self.first[i] = time.perf_counter()
        self.tokens[i] += n_tokens

    def now(self, i: int) -> Timings:
        return Timings(prompt_n=self.prompt[i], prompt_ms=(self.first[i] - self.start) * 1e3,
                       predicted_n=self.tokens[i], predicted_ms=(time.perf_counter() - self.first[i]) * 1e3)


async def _openai_stream(streams: list[RequestStream], req: Any, rid: str, created: int,
                         model: str, clock: LiveTimings) -> AsyncIterator[str]:
    chat = req.chat
    builders = [fmt.LogprobsBuilder(chat) if req.logprobs is not None else None for _ in streams]
    if chat:
        for i in range(len(streams)):
            yield sse_data(fmt.chunk_body(rid, created, model, True, index=i, text="", role=True))
    ends: list[Finished] = []
    async for i, event in merged(streams):
        if isinstance(event, Delta):
            clock.count(i, len(event.tokens))
            if not event.text and not event.logprobs:
                continue
            lp = builders[i].shape(event.logprobs) if builders[i] is not None else None
            chunk = fmt.chunk_body(rid, created, model, chat, index=i, text=event.text, logprobs=lp)
            if req.timings:
                chunk["timings"] = fmt.timings_body(clock.now(i))
            yield sse_data(chunk)
            continue
        if event.reason == "cancelled":
            return
        if event.reason == "error":
            cancel_all(streams)()
            yield sse_data(generation_failed(event).body())
            yield DONE
            return
        ends.append(event)
        chunk = fmt.chunk_body(rid, created, model, chat, index=i, finish_reason=event.reason)
        if req.timings:
            chunk["timings"] = fmt.timings_body(event.timings)
        yield sse_data(chunk)
    if req.include_usage:
        firsts = ends[:: req.n] if req.n else ends
        usage = Usage(sum(e.usage.prompt_tokens for e in firsts), sum(e.usage.completion_tokens for e in ends),
                      sum(e.usage.cached_tokens for e in firsts))
        chunk = fmt.usage_chunk(rid, created, model, chat, usage)
        if req.timings and ends:
            chunk["timings"] = fmt.timings_body(ends[0].timings)
        yield sse_data(chunk)
    yield DONE


# -- llama-server's native API ------------------------------------------------------------------
async def native_completion(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    info = s.engine.info
    model = check_model(body, info.names, s.strict_model)

    def prepare() -> tuple[native.NativeRequest, list[list[int]], list[str]]:
        req = native.parse_native(body, info.n_vocab, tokenizer_of(s))
        prompts = [prompt_ids(s, p) for p in req.prompts]
        return req, prompts, [s.engine.detokenize(ids) for ids in prompts]

    req, prompts, texts = await asyncio.to_thread(prepare)
    logprobs = req.n_probs if req.n_probs else None
    streams = await submit_all(s, [build(req.gen, ids, req.max_tokens, logprobs, i, info.n_ctx,
                                         req.post_sampling_probs) for i, ids in enumerate(prompts)])
    if req.stream:
        return EventStreamResponse(_native_stream(s, streams, req, texts, model), cancel_all(streams))
    outcomes = await collect(request, streams)
    results = []
    for i, o in enumerate(outcomes):
        probs = native.probs_body(o.logprobs, o.tokens, req.post_sampling_probs) if req.n_probs else None
        results.append(native.pick_fields(native.final_body(i, "".join(o.text), o.tokens, texts[i], req, o.end,
                                                            model, info.n_ctx, probs), req.response_fields))
    return JSONResponse(results[0] if len(results) == 1 else results)


async def _native_stream(s: ServerState, streams: list[RequestStream], req: native.NativeRequest,
                         texts: list[str], model: str) -> AsyncIterator[str]:
    async for i, event in merged(streams):
        if isinstance(event, Delta):
            probs = native.probs_body(event.logprobs, event.tokens, req.post_sampling_probs) if req.n_probs else None
            yield sse_data(native.partial_body(i, event.text, event.tokens, req, probs))
            continue
        if event.reason == "cancelled":
            return
        if event.reason == "error":
            cancel_all(streams)()
            yield sse_data(generation_failed(event).body())
            return
        yield sse_data(native.final_body(i, "", [], texts[i], req, event, model, s.engine.info.n_ctx, None))


async def tokenize(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    return JSONResponse(await asyncio.to_thread(_tokenize, s, body))


def _tokenize(s: ServerState, body: dict[str, Any]) -> dict[str, Any]:
    content = body.get("content", "")
    if isinstance(content, list):
        ids = [t for t in content if is_int(t)] + [i for t in content if isinstance(t, str)
                                                   for i in s.engine.tokenize(t, False, True)]
        if len(ids) != len(content) and not all(is_int(t) or isinstance(t, str) for t in content):
            raise type_error("content", "a string")
    elif isinstance(content, str):
        ids = s.engine.tokenize(content, boolean(body, "add_special", False), boolean(body, "parse_special", True))
    else:
        raise type_error("content", "a string")
    if boolean(body, "with_pieces", False):
        return {"tokens": native.token_pieces(ids, s.engine.token_bytes)}
    return {"tokens": ids}


async def detokenize(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list) or not all(is_int(t) for t in tokens):
        raise type_error("tokens", "a list of token ids")
    n_vocab = s.engine.info.n_vocab
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise value_error("tokens", f"has token id {bad[0]}, outside the vocabulary (0..{n_vocab - 1})")
    return JSONResponse({"content": await asyncio.to_thread(s.engine.detokenize, tokens)})


async def apply_template(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    messages = parse_messages(body.get("messages"))
    try:
        return JSONResponse({"prompt": await asyncio.to_thread(s.engine.chat_prompt, messages)})
    except EngineRejected as exc:
        raise value_error("messages", f": {exc}") from None


async def props(request: Request) -> Response:
    if request.method == "POST":
        raise ApiError(501, "this server does not support changing its properties", type="not_supported_error",
                       code="not_supported")
    return JSONResponse(native.props_body(state(request).engine.info, f"llamay {__version__}"))


async def slots(request: Request) -> Response:
    s = state(request)
    listing = s.engine.slots()
    # As llama-server, the parameter's presence asks for it, whatever its value.
    if "fail_on_no_slot" in request.query_params and all(sl["is_processing"] for sl in listing):
        raise ApiError(503, "no slot available", type="unavailable_error", code="no_slot_available")
    return JSONResponse(listing)


async def not_supported(request: Request) -> Response:
    """Endpoints llama-server has behind flags llamay does not offer: embeddings, reranking, infill,
    and slot save/restore (which would write and read server files named by the client)."""
    path = request.url.path
    what = ("embeddings" if "embedding" in path else "reranking" if "rerank" in path else
            "slots action" if path.startswith("/slots/") else "infill")
    raise ApiError(501, f"this server does not support {what}", type="not_supported_error", code="not_supported")


# -- Anthropic ----------------------------------------------------------------------------------
async def messages(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    info = s.engine.info
    model = check_model(body, info.names, s.strict_model)

    def prepare() -> tuple[anth.MessagesRequest, list[int]]:
        req = anth.parse_messages_request(body, info.n_vocab, tokenizer_of(s))
        return req, chat_ids(s, req.messages)

    req, ids = await asyncio.to_thread(prepare)
    streams = await submit_all(s, [build(req.gen, ids, req.max_tokens, None, 0, info.n_ctx)])
    mid = "msg_" + uuid.uuid4().hex[:24]
    if req.stream:
        return EventStreamResponse(_anthropic_stream(streams[0], mid, model, len(ids)), streams[0].cancel)
    o = (await collect(request, streams))[0]
    return JSONResponse(anth.message_body(mid, model, "".join(o.text), o.end.reason, o.end.stop_word, o.end.usage))


async def _anthropic_stream(stream: RequestStream, mid: str, model: str, n_prompt: int) -> AsyncIterator[str]:
    start = anth.message_body(mid, model, "", "stop", "", Usage(n_prompt, 0, 0))
    start.update(content=[], stop_reason=None)
    yield anth.sse_event("message_start", {"type": "message_start", "message": start})
    yield anth.sse_event("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}})
    yield anth.sse_event("ping", {"type": "ping"})
    async for event in stream:
        if isinstance(event, Delta):
            if event.text:
                yield anth.sse_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                             "delta": {"type": "text_delta", "text": event.text}})
            continue
        if event.reason == "cancelled":
            return
        if event.reason == "error":
            yield anth.sse_event("error", anth.error_body(generation_failed(event)))
            return
        yield anth.sse_event("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield anth.sse_event("message_delta", {
            "type": "message_delta", "usage": anth.usage_body(event.usage),
            "delta": {"stop_reason": anth.stop_reason(event.reason, event.stop_word),
                      "stop_sequence": event.stop_word or None}})
        yield anth.sse_event("message_stop", {"type": "message_stop"})


async def count_tokens(request: Request) -> Response:
    s = state(request)
    body = await read_json(request)
    req = anth.parse_messages_request(body, s.engine.info.n_vocab, tokenizer_of(s), count_only=True)
    try:
        return JSONResponse({"input_tokens": len(await asyncio.to_thread(s.engine.chat_ids, req.messages))})
    except EngineRejected as exc:
        raise value_error("messages", f": {exc}") from None


# -- service ------------------------------------------------------------------------------------
async def health(request: Request) -> Response:
    """llama-server's /health: {"status": "ok"}, or 503 with an error once the engine has failed."""
    h = state(request).engine.health()
    if h["ok"]:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "error", "error": {"code": 503, "message": f"the engine has stopped: {h['failure']}",
                                                       "type": "unavailable_error"}}, status_code=503)


async def healthz(request: Request) -> Response:
    s = state(request)
    h = s.engine.health()
    info = s.engine.info
    return JSONResponse({
        "status": "ok" if h["ok"] else "error", "error": h["failure"] or None, "model": info.names[0],
        "backend": info.backend, "device": info.device, "gpu": info.gpu, "queue_depth": h["queue_depth"],
        "running": h["running"], "kv_pages_used": h["kv_pages_used"], "kv_pages_total": h["kv_pages_total"],
        "n_ctx": info.n_ctx,
    }, status_code=200 if h["ok"] else 503)


async def list_models(request: Request) -> Response:
    s = state(request)
    info = s.engine.info
    meta = {"n_vocab": info.n_vocab, "n_ctx_train": info.n_ctx_train, "n_embd": info.n_embd,
            "n_params": info.n_params, "size": info.size}
    # One entry, as llama-server lists it: the served name, with every name it answers to.
    name = info.names[0]
    return JSONResponse({
        "object": "list",
        "data": [{"id": name, "object": "model", "created": s.created, "owned_by": "llamay",
                  "aliases": list(info.names), "meta": meta}],
        "models": [{"name": name, "model": name, "type": "model", "capabilities": ["completion"]}],
    })


async def metrics_page(request: Request) -> Response:
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    s = state(request)
    return Response(request.app.state.http_metrics.render() + s.engine.metrics(), media_type=CONTENT_TYPE_LATEST)


def routes() -> list[Route]:
    """The route table: OpenAI's paths with and without /v1, llama-server's, Anthropic's."""
    table: list[tuple[tuple[str, ...], Any, list[str]]] = [
        (("/v1/completions",), completions, ["POST"]),
        (("/v1/chat/completions", "/chat/completions"), chat_completions, ["POST"]),
        (("/v1/models", "/models"), list_models, ["GET"]),
        (("/completion", "/completions"), native_completion, ["POST"]),
        (("/tokenize",), tokenize, ["POST"]),
        (("/detokenize",), detokenize, ["POST"]),
        (("/apply-template",), apply_template, ["POST"]),
        (("/props",), props, ["GET", "POST"]),
        (("/slots",), slots, ["GET"]),
        (("/v1/messages",), messages, ["POST"]),
        (("/v1/messages/count_tokens",), count_tokens, ["POST"]),
        (("/health", "/v1/health"), health, ["GET"]),
        (("/healthz",), healthz, ["GET"]),
        (("/metrics",), metrics_page, ["GET"]),
        (("/embedding", "/embeddings", "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank", "/v1/reranking",
          "/infill", "/slots/{id_slot}"), not_supported, ["POST"]),
    ]
    return [Route(path, handler, methods=methods) for paths, handler, methods in table for path in paths]

