"""`llamay serve`: an HTTP server over one model speaking OpenAI's, llama-server's and Anthropic's APIs.

- `app.py`: the Starlette application: routes behind API-key checks, CORS and JSON error shapes.
- `routes.py`: every route handler, reaching the model only through `Engine`.
- `engine_api.py`: the `Engine` interface the routes call, and `LocalEngine` over a model here.
- `schemas.py`: request validation (safe JSON, typed fields, shared generation settings, OpenAI).
- `llama_api.py`, `anthropic_api.py`: llama-server's native and Anthropic's request/answer shapes.
- `openai_format.py`: OpenAI's answer shapes (plus llama-server's timings).
- `scheduler.py`: the continuous-batching loop, in the one thread that touches the model.
- `logit_adjust.py`: logit_bias and presence/frequency penalties.
- `text_stream.py`: token ids to text pieces with stop strings, pushed one token at a time.
- `sse.py`: server-sent events, with the client's disconnect cancelling the request.
- `metrics.py`: the Prometheus registries of one server.
- `runner.py`: uvicorn with a header read timeout, a bounded drain and a non-zero exit on failure.
"""
