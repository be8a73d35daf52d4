"""`llamay serve`: an OpenAI-compatible HTTP server over one model.

- `app.py`: the Starlette routes, auth, body limits and OpenAI-style errors.
- `schemas.py`: request validation into `CompletionRequest`; bad input becomes an `ApiError`.
- `scheduler.py`: the continuous-batching loop, in the one thread that touches the model.
- `text_stream.py`: token ids to text pieces with stop strings, pushed one token at a time.
- `sse.py`: server-sent events, with the client's disconnect cancelling the request.
- `metrics.py`: the Prometheus registry of one server.
"""
