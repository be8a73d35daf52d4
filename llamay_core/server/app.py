"""The Starlette application: the routes (routes.py) behind API-key checks, CORS and error shapes.

`create_app` wires a model to the routes through a `LocalEngine`; `create_app_for_engine` serves
any `Engine`. Every error is JSON: OpenAI's envelope, or Anthropic's on /v1/messages.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from typing import Any, AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamay_core.server import anthropic_api
from llamay_core.server.engine_api import Engine, LocalEngine
from llamay_core.server.metrics import HttpMetrics, ServerMetrics
from llamay_core.server.routes import ServerState, routes
from llamay_core.server.scheduler import Scheduler
from llamay_core.server.schemas import ApiError

log = logging.getLogger("llamay.server")

DEFAULT_MAX_BODY_BYTES = 1 << 20
COUNTED_ROUTES = frozenset(r.path for r in routes())
# Answered without the API key, as llama-server does: health checks for load balancers, and the
# model list (it names the model and nothing else).
OPEN_ROUTES = ("/healthz", "/health", "/v1/health", "/models", "/v1/models")


def create_app(model: Any, *, max_running: int = 8, max_waiting: int = 64, prefill_chunk: int = 256,
               api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               model_id: str | None = None, aliases: Sequence[str] = (), strict_model: bool = False,
               lookup_draft_max: int = 0, cors_origins: Sequence[str] = (), read_timeout_s: float = 30.0,
               shutdown_timeout_s: float = 30.0, on_fatal: Callable[[], None] | None = None,
               scheduler: Any = None) -> Starlette:
    """An ASGI app serving `model`; its lifespan starts the scheduler thread and drains it at shutdown.

    on_fatal: called (from the scheduler thread) if the scheduler dies, so the process can exit.
    `scheduler` replaces the local Scheduler with an object of the same HTTP-side surface (start,
    stop, submit, cancel, alive, queue_depth, n_running, max_running, metrics), e.g.
    `cluster.ClusterScheduler` forwarding to Ray Serve replicas.
    """
    if scheduler is None:
        scheduler = Scheduler(model, max_running=max_running, max_waiting=max_waiting, prefill_chunk=prefill_chunk,
                              metrics=ServerMetrics(), lookup_draft_max=lookup_draft_max, on_fatal=on_fatal)
        scheduler.metrics.watch_llama_server(scheduler, model)  # a remote scheduler's replicas report theirs
    metrics = scheduler.metrics
    metrics.watch(kv_pages_used=lambda: model.pool.pages_in_use, kv_pages_total=model.pool.capacity,
                  queue_depth=lambda: scheduler.queue_depth, running=lambda: scheduler.n_running)
    availability = model.backend.probe()
    gpu = availability.details.get("gpu")
    names = [model_id or model.display_name] + [a for a in aliases if a and a != (model_id or model.display_name)]
    engine = LocalEngine(model, scheduler, names, availability.device,
                         bool(gpu) if gpu is not None else model.backend.capabilities.device_kind == "gpu")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            # uvicorn has already given in-flight requests the shutdown timeout; what is left
            # belongs to clients that are gone, so it gets only a moment more.
            await asyncio.to_thread(scheduler.stop, min(shutdown_timeout_s, 5.0))

    app = create_app_for_engine(engine, api_key=api_key, max_body_bytes=max_body_bytes, strict_model=strict_model,
                                cors_origins=cors_origins, read_timeout_s=read_timeout_s, lifespan=lifespan)
    app.state.scheduler = scheduler
    return app


def create_app_for_engine(engine: Engine, *, api_key: str | None = None,
                          max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, strict_model: bool = False,
                          cors_origins: Sequence[str] = (), read_timeout_s: float = 30.0,
                          lifespan: Any = None) -> Starlette:
    """The routes over any `Engine` (local, or forwarding to replicas)."""
    state = ServerState(engine=engine, strict_model=strict_model, max_body_bytes=max_body_bytes,
                        read_timeout_s=read_timeout_s)
    app = Starlette(routes=routes(), lifespan=lifespan,
                    exception_handlers={ApiError: _api_error, HTTPException: _http_error})
    app.state.llamay = state
    app.state.http_metrics = HttpMetrics()
    app.add_middleware(GuardMiddleware, api_key=api_key or None, metrics=app.state.http_metrics)
    if cors_origins:
        # Outside the key check: a browser's preflight carries no key and must still be answered.
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"], allow_credentials=True, max_age=600)
    return app


class GuardMiddleware:
    """Checks the API key (Authorization: Bearer, or Anthropic's X-Api-Key) and counts every answer."""

    def __init__(self, app: Any, api_key: str | None, metrics: HttpMetrics) -> None:
        self.app = app
        self.api_key = api_key
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        status = [500]
        started = [False]

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                started[0] = True
            await send(message)

        try:
            if self.api_key and path not in OPEN_ROUTES and not self._authorized(scope):
                error = ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY or X-Api-Key: KEY)",
                                 type="authentication_error", code="invalid_api_key",
                                 headers={"WWW-Authenticate": "Bearer"})
                await error_response(error, path)(scope, receive, counting_send)
                return
            await self.app(scope, receive, counting_send)
        except Exception as exc:
            # A bug in a handler: the request gets a JSON 500 (when nothing was sent yet), the
            # connection and the server go on.
            log.error("unexpected error on %s", path, exc_info=exc)
            if status[0] == 500 and not started[0]:
                error = ApiError(500, f"internal error: {type(exc).__name__}", type="server_error",
                                 code="internal_error")
                await error_response(error, path)(scope, receive, counting_send)
        finally:
            route = path if path in COUNTED_ROUTES else "other"
            self.metrics.requests.labels(route=route, status=str(status[0])).inc()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        expected = self.api_key.encode()
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), expected):
                    return True
            elif name == b"x-api-key" and hmac.compare_digest(value.strip(), expected):
                return True
        return False


def error_response(error: ApiError, path: str) -> JSONResponse:
    body = anthropic_api.error_body(error) if path.startswith("/v1/messages") else error.body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request.url.path)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(ApiError(exc.status_code, str(exc.detail), type=kind, headers=exc.headers),
                          request.url.path)
