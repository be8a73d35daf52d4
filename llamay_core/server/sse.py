"""Server-sent events for `stream: true`, and noticing a client that goes away.

Starlette's StreamingResponse only learns of a disconnect when a write fails, which during a long
prefill can be seconds later; here a watcher waits on `receive()` for `http.disconnect` and
cancels the request at once, so its sequence leaves the batch at the next step.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Awaitable, Callable

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

DONE = "data: [DONE]\n\n"


def sse_data(obj: Any) -> str:
    """One event carrying a JSON object, in OpenAI's framing (`data: {...}` and a blank line)."""
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    """Wait until the client disconnects, then call `on_disconnect` (run as a task; cancel it when done)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


class EventStreamResponse:
    """An ASGI response streaming `events` (already framed strings) as text/event-stream."""

    def __init__(self, events: AsyncIterator[str], on_disconnect: Callable[[], None]) -> None:
        self.events = events
        self.on_disconnect = on_disconnect

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(watch_disconnect(receive, self.on_disconnect))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ]})
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk.encode("utf-8"), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the write found the connection closed
            self.on_disconnect()
        finally:
            watcher.cancel()
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                await aclose()
