"""Running the app under uvicorn: a header read timeout, a bounded drain, and a non-zero exit when
the engine dies.

uvicorn times out idle keep-alive connections but not a request whose headers arrive only in
part: such a client would hold its connection (and a file descriptor) forever. `ReadTimeoutH11`
closes a connection whose request headers are not complete within the read timeout; the body's
own timeout is in routes.read_json.
"""
from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


class ReadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing connections that leave a request's headers incomplete."""

    read_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._between_requests():
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.read_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def protocol_with_timeout(read_timeout_s: float) -> type[ReadTimeoutH11]:
    return type("ReadTimeoutH11Configured", (ReadTimeoutH11,), {"read_timeout_s": read_timeout_s})


class Runner:
    """Serves an app on a bound socket until SIGTERM/SIGINT or until the engine dies."""

    def __init__(self, sock: socket.socket, *, read_timeout_s: float = 30.0, shutdown_timeout_s: float = 30.0,
                 log_level: str = "warning") -> None:
        self.sock = sock
        self.read_timeout_s = read_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.log_level = log_level
        self.server: uvicorn.Server | None = None
        self.fatal = False

    def on_fatal(self) -> None:
        """The engine died (called from its thread): stop serving; `run` then returns 1."""
        self.fatal = True
        if self.server is not None:
            self.server.should_exit = True

    def run(self, app: Any) -> int:
        host, port = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, host=host, port=port, log_level=self.log_level, access_log=False,
                                lifespan="on", http=protocol_with_timeout(self.read_timeout_s),
                                timeout_graceful_shutdown=self.shutdown_timeout_s, timeout_keep_alive=5)
        self.server = uvicorn.Server(config)
        # uvicorn handles SIGTERM/SIGINT: it stops accepting, lets in-flight requests finish for up
        # to the shutdown timeout, then runs the app's shutdown, which drains the scheduler.
        self.server.run(sockets=[self.sock])
        return 1 if self.fatal else 0
