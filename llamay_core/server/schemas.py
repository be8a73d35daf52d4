"""Request bodies of /v1/completions and /v1/chat/completions, checked field by field.

Anything wrong becomes an `ApiError`, which the app turns into OpenAI's error JSON
(`{"error": {"message", "type", "param", "code"}}`) with a 4xx status. Fields OpenAI defines but
llamay does not implement are refused when they would change the result, and ignored otherwise
(`user`, `metadata`, ...), so the official clients work unchanged.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import attrs

MAX_STOP_STRINGS = 4
MAX_COMPLETION_LOGPROBS = 5
MAX_CHAT_TOP_LOGPROBS = 20


class ApiError(Exception):
    """An error answered as OpenAI-style JSON with an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@attrs.frozen
class CompletionRequest:
    """A validated request; the prompt is still text (or ids) until the app tokenizes it."""

    chat: bool
    prompt: str | list[int]
    messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None  # None: until the context is full
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # None: no logprobs; N: the chosen token plus N alternatives
    ignore_eos: bool = False  # llama.cpp's extension: generate max_tokens whatever the model says
    response_format: Any = None  # {"type": "text" | "json_object" | "json_schema", ...}; checked by the app


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def parse_request(body: dict[str, Any], model_id: str, chat: bool) -> CompletionRequest:
    """Check `body` against the endpoint's schema; raises ApiError naming the bad field."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _type_error("model", "a string")
    if model is not None and model != model_id:
        raise ApiError(404, f"the model {model!r} does not exist; this server serves {model_id!r}",
                       param="model", code="model_not_found")
    n = _int(body, "n", 1, minimum=1)
    if n != 1:
        raise ApiError(400, "only n=1 is supported", param="n", code="unsupported_value")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(body, name, 0.0) != 0.0:
            raise ApiError(400, f"{name} is not supported (use repeat_penalty)", param=name, code="unsupported_value")
    if body.get("echo") not in (None, False):
        raise ApiError(400, "echo is not supported", param="echo", code="unsupported_value")
    if body.get("best_of") not in (None, 1):
        raise ApiError(400, "best_of is not supported", param="best_of", code="unsupported_value")
    if chat:
        messages = _messages(body)
        prompt: str | list[int] = ""
        max_tokens = _optional_int(body, "max_completion_tokens", minimum=1)
        if max_tokens is None:
            max_tokens = _optional_int(body, "max_tokens", minimum=1)
        logprobs = _chat_logprobs(body)
    else:
        messages = ()
        prompt = _prompt(body)
        max_tokens = _int(body, "max_tokens", 16, minimum=1)
        logprobs = _optional_int(body, "logprobs", minimum=0, maximum=MAX_COMPLETION_LOGPROBS)
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _type_error("stream_options", "an object")
    include_usage = _bool(options or {}, "include_usage", False, param="stream_options.include_usage")
    return CompletionRequest(
        chat=chat, prompt=prompt, messages=messages, max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, minimum=0.0, maximum=2.0),
        top_p=_number(body, "top_p", 1.0, minimum=0.0, maximum=1.0),
        top_k=_int(body, "top_k", 0, minimum=0),
        min_p=_number(body, "min_p", 0.0, minimum=0.0, maximum=1.0),
        repeat_penalty=_number(body, "repeat_penalty", 1.0, minimum=0.0),
        seed=_optional_int(body, "seed"),
        stop=_stop(body), stream=stream, include_usage=include_usage, logprobs=logprobs,
        ignore_eos=_bool(body, "ignore_eos", False),
        response_format=_response_format(body),
    )


def _response_format(body: Mapping[str, Any]) -> Any:
    value = body.get("response_format")
    if value is not None and not isinstance(value, dict):
        raise _type_error("response_format", "an object")
    return value


def _type_error(param: str, expected: str) -> ApiError:
    return ApiError(400, f"{param} must be {expected}", param=param, code="invalid_type")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_int(body: Mapping[str, Any], name: str, minimum: int | None = None,
                  maximum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise _type_error(name, "an integer")
    if minimum is not None and value < minimum:
        raise ApiError(400, f"{name} must be >= {minimum}, got {value}", param=name, code="invalid_value")
    if maximum is not None and value > maximum:
        raise ApiError(400, f"{name} must be <= {maximum}, got {value}", param=name, code="invalid_value")
    return value


def _int(body: Mapping[str, Any], name: str, default: int, minimum: int | None = None) -> int:
    value = _optional_int(body, name, minimum=minimum)
    return default if value is None else value


def _number(body: Mapping[str, Any], name: str, default: float, minimum: float | None = None,
            maximum: float | None = None) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _type_error(name, "a number")
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ApiError(400, f"{name} must be {bounds}, got {value}", param=name, code="invalid_value")
    return float(value)


def _bool(body: Mapping[str, Any], name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _type_error(param or name, "true or false")
    return value


def _prompt(body: Mapping[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "prompt is required", param="prompt", code="missing_field")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one prompt
            if isinstance(prompt, str):
                return prompt
        if all(_is_int(t) for t in prompt):
            return list(prompt)
        if all(isinstance(p, (str, list)) for p in prompt):
            raise ApiError(400, "only one prompt per request is supported", param="prompt", code="unsupported_value")
    raise _type_error("prompt", "a string, a list of one string, or a list of token ids")


def _messages(body: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "messages is required", param="messages", code="missing_field")
    if not isinstance(messages, list) or not messages:
        raise _type_error("messages", "a non-empty list of messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _type_error(f"messages[{i}]", "an object with a string 'role'")
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI's content parts: only text parts can be used here
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                               param=f"messages[{i}].content", code="unsupported_value")
            content = "".join(p["text"] for p in content)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _type_error(f"messages[{i}].content", "a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return tuple(out)


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    wanted = _bool(body, "logprobs", False)
    top = _optional_int(body, "top_logprobs", minimum=0, maximum=MAX_CHAT_TOP_LOGPROBS)
    if top is not None and not wanted:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    return (top or 0) if wanted else None


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _type_error("stop", "a string or a list of strings")
    if len(stop) > MAX_STOP_STRINGS:
        raise ApiError(400, f"at most {MAX_STOP_STRINGS} stop strings", param="stop", code="invalid_value")
    return tuple(s for s in stop if s)
