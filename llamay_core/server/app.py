"""The Starlette application: OpenAI's routes over one model, plus /healthz and /metrics.

Handlers run on the event loop and never touch the model's compute: they validate, tokenize
(the tokenizer is read-only, so sharing it with the scheduler thread is safe), submit a `Job`
and relay its events. The scheduler thread does everything else.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
import uuid
from typing import Any, AsyncIterator

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamay_core.constrain.sources import constraint_from_response_format
from llamay_core.engine.sampling import SamplingParams
from llamay_core.errors import LlamayError
from llamay_core.server import openai_format as fmt
from llamay_core.server.metrics import ServerMetrics
from llamay_core.server.scheduler import Delta, Event, Finished, Job, Scheduler, SchedulerFull
from llamay_core.server.schemas import ApiError, CompletionRequest, parse_json, parse_request
from llamay_core.server.sse import DONE, EventStreamResponse, sse_data, watch_disconnect

DEFAULT_MAX_BODY_BYTES = 1 << 20
ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/healthz", "/metrics")
OPEN_ROUTES = ("/healthz",)  # answered without the API key, for load balancers


@attrs.define
class ServerState:
    """What every handler needs: the model (read-only here), its scheduler and the metrics."""

    model: Any
    scheduler: Scheduler
    metrics: ServerMetrics
    model_id: str
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    retry_after_s: int = 1
    device: str = ""
    gpu: bool = False
    created: int = attrs.field(factory=lambda: int(time.time()))


def create_app(model: Any, *, max_running: int = 8, max_waiting: int = 64, prefill_chunk: int = 256,
               api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               model_id: str | None = None, lookup_draft_max: int = 0, scheduler: Any = None) -> Starlette:
    """An ASGI app serving `model`; its lifespan starts the scheduler thread and drains it at shutdown.

    `scheduler` replaces the local Scheduler with an object of the same HTTP-side surface (start,
    stop, submit, cancel, alive, queue_depth, n_running, metrics), e.g. `cluster.ClusterScheduler`.
    """
    if scheduler is None:
        scheduler = Scheduler(model, max_running=max_running, max_waiting=max_waiting, prefill_chunk=prefill_chunk,
                              metrics=ServerMetrics(), lookup_draft_max=lookup_draft_max)
    metrics = scheduler.metrics
    metrics.watch(kv_pages_used=lambda: model.pool.pages_in_use, kv_pages_total=model.pool.capacity,
                  queue_depth=lambda: scheduler.queue_depth, running=lambda: scheduler.n_running)
    availability = model.backend.probe()
    gpu = availability.details.get("gpu")
    state = ServerState(model=model, scheduler=scheduler, metrics=metrics,
                        model_id=model_id or model.display_name, api_key=api_key or None,
                        max_body_bytes=max_body_bytes, device=availability.device,
                        gpu=bool(gpu) if gpu is not None else model.backend_name not in ("reference", "cpu"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            await asyncio.to_thread(scheduler.stop)

    app = Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_page, methods=["GET"]),
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.llamay = state
    app.add_middleware(GuardMiddleware, state=state)
    return app


class GuardMiddleware:
    """Checks the API key and counts every answer by route and status."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        status = [500]

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.state.api_key and path not in OPEN_ROUTES and not self._authorized(scope):
                error = ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY)",
                                 type="authentication_error", code="invalid_api_key",
                                 headers={"WWW-Authenticate": "Bearer"})
                await _error_response(error)(scope, receive, counting_send)
                return
            await self.app(scope, receive, counting_send)
        finally:
            route = path if path in ROUTES else "other"
            self.state.metrics.requests.labels(route=route, status=str(status[0])).inc()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                                          self.state.api_key.encode())
        return False


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return _error_response(ApiError(exc.status_code, str(exc.detail), type=kind, headers=exc.headers))


def _state(request: Request) -> ServerState:
    return request.app.state.llamay


# -- simple routes ------------------------------------------------------------------------------
async def healthz(request: Request) -> Response:
    s = _state(request)
    ok = s.scheduler.alive
    return JSONResponse({
        "status": "ok" if ok else "error",
        "model": s.model_id,
        "backend": s.model.backend_name,
        "device": s.device,
        "gpu": s.gpu,
        "queue_depth": s.scheduler.queue_depth,
        "running": s.scheduler.n_running,
        "kv_pages_used": s.model.pool.pages_in_use,
        "kv_pages_total": s.model.pool.capacity,
        "n_ctx": s.model.n_ctx,
    }, status_code=200 if ok else 503)


async def list_models(request: Request) -> Response:
    s = _state(request)
    return JSONResponse({"object": "list", "data": [
        {"id": s.model_id, "object": "model", "created": s.created, "owned_by": "llamay"}]})


async def metrics_page(request: Request) -> Response:
    s = _state(request)
    return Response(s.metrics.render(), media_type=s.metrics.content_type)


# -- generation ---------------------------------------------------------------------------------
async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


class _Relay:
    """Carries a job's events from the scheduler thread into this request's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def notify(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


async def _generate(request: Request, chat: bool) -> Response:
    s = _state(request)
    body = parse_json(await _read_body(request, s.max_body_bytes))
    req = parse_request(body, s.model_id, chat)
    prompt_ids = _prompt_ids(s, req)
    try:
        params = SamplingParams(temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
                                repeat_penalty=req.repeat_penalty, seed=req.seed)
    except LlamayError as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None
    try:
        constraint = constraint_from_response_format(s.model, req.response_format)
    except LlamayError as exc:
        raise ApiError(400, str(exc), code="invalid_response_format", param="response_format") from None
    relay = _Relay()
    max_tokens = req.max_tokens if req.max_tokens is not None else s.model.n_ctx
    job = Job(prompt_ids, params, max_tokens, relay.notify, stop=req.stop, logprobs=req.logprobs,
              ignore_eos=req.ignore_eos, constraint=constraint)
    try:
        s.scheduler.submit(job)
    except SchedulerFull as exc:
        raise ApiError(503, f"server busy: {exc}; retry later", type="server_error", code="server_busy",
                       headers={"Retry-After": str(s.retry_after_s)}) from None
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    if req.stream:
        return EventStreamResponse(_stream(relay, req, rid, created, s.model_id),
                                   on_disconnect=lambda: s.scheduler.cancel(job))
    watcher = asyncio.create_task(watch_disconnect(request.receive, lambda: s.scheduler.cancel(job)))
    try:
        return await _collect(relay, req, rid, created, s.model_id)
    finally:
        watcher.cancel()


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes exceeds the limit of {limit}", code="body_too_large")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes", code="body_too_large")
        parts.append(part)
    return b"".join(parts)


def _prompt_ids(s: ServerState, req: CompletionRequest) -> list[int]:
    model = s.model
    try:
        prompt = model.chat_prompt(list(req.messages)) if req.chat else req.prompt
        ids = model._prompt_ids(prompt, first=True)
    except LlamayError as exc:
        raise ApiError(400, str(exc), param="messages" if req.chat else "prompt", code="invalid_value") from None
    if not ids:
        raise ApiError(400, "the prompt is empty", param="prompt", code="invalid_value")
    if len(ids) >= model.n_ctx:
        raise ApiError(400, f"the prompt has {len(ids)} tokens; the context holds {model.n_ctx} "
                            "(leave room for at least one generated token)",
                       param="messages" if req.chat else "prompt", code="context_length_exceeded")
    return ids


async def _collect(relay: _Relay, req: CompletionRequest, rid: str, created: int, model_id: str) -> Response:
    text: list[str] = []
    logprob_items = []
    while True:
        event = await relay.queue.get()
        if isinstance(event, Delta):
            text.append(event.text)
            logprob_items.extend(event.logprobs)
            continue
        if event.reason == "error":
            raise ApiError(500, f"generation failed: {event.error}", type="server_error", code="internal_error")
        logprobs = fmt.LogprobsBuilder(req.chat).shape(logprob_items) if req.logprobs is not None else None
        return JSONResponse(fmt.completion_body(rid, created, model_id, req.chat, "".join(text),
                                                event.reason, event.usage, logprobs))


async def _stream(relay: _Relay, req: CompletionRequest, rid: str, created: int,
                  model_id: str) -> AsyncIterator[str]:
    logprobs = fmt.LogprobsBuilder(req.chat) if req.logprobs is not None else None
    if req.chat:
        yield sse_data(fmt.chunk_body(rid, created, model_id, True, text="", role=True))
    while True:
        event = await relay.queue.get()
        if isinstance(event, Delta):
            lp = logprobs.shape(event.logprobs) if logprobs is not None else None
            yield sse_data(fmt.chunk_body(rid, created, model_id, req.chat, text=event.text, logprobs=lp))
            continue
        assert isinstance(event, Finished)
        if event.reason == "cancelled":
            return
        if event.reason == "error":
            yield sse_data(ApiError(500, f"generation failed: {event.error}", type="server_error",
                                    code="internal_error").body())
        else:
            yield sse_data(fmt.chunk_body(rid, created, model_id, req.chat, finish_reason=event.reason))
            if req.include_usage:
                yield sse_data(fmt.usage_chunk(rid, created, model_id, req.chat, event.usage))
        yield DONE
        return
