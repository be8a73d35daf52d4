"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens): requests and answer shapes.

Errors on these routes use Anthropic's envelope (`{"type": "error", "error": {"type", "message"}}`);
streams use its named events (message_start ... message_stop).
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from llamay_core.server.scheduler import Usage
from llamay_core.server.schemas import (
    ApiError,
    Generation,
    Tokenize,
    boolean,
    integer,
    message_text,
    number,
    parse_generation,
    type_error,
    unsupported,
)

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


@attrs.frozen
class MessagesRequest:
    messages: tuple[dict[str, str], ...]  # system first when given, in OpenAI's role/content form
    max_tokens: int
    gen: Generation
    stream: bool = False


def parse_messages_request(body: Mapping[str, Any], n_vocab: int, tokenize: Tokenize,
                           count_only: bool = False) -> MessagesRequest:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise type_error("messages", "a non-empty list of messages")
    messages: list[dict[str, str]] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": message_text(system, "system")})
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise type_error(f"messages[{i}]", "an object with role 'user' or 'assistant'")
        messages.append({"role": m["role"], "content": message_text(m.get("content"), f"messages[{i}].content")})
    if body.get("tools") not in (None, []):
        raise unsupported("tools", "tools are not supported by this server")
    if count_only:
        return MessagesRequest(tuple(messages), 1, Generation())
    max_tokens = integer(body, "max_tokens", 0, minimum=1)
    if body.get("max_tokens") is None:
        raise ApiError(400, "max_tokens is required", param="max_tokens", code="missing_field")
    number(body, "temperature", 1.0, minimum=0.0, maximum=1.0)
    gen = parse_generation({**body, "stop": body.get("stop_sequences")}, n_vocab, tokenize)
    return MessagesRequest(tuple(messages), max_tokens, gen, boolean(body, "stream", False))


def error_body(error: ApiError) -> dict[str, Any]:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large",
            429: "rate_limit_error", 503: "overloaded_error"}.get(error.status)
    if kind is None:
        kind = "invalid_request_error" if error.status < 500 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def stop_reason(reason: str, stop_word: str) -> str:
    return "stop_sequence" if stop_word else STOP_REASONS.get(reason, "end_turn")


def message_body(mid: str, model: str, text: str, reason: str, stop_word: str, usage: Usage) -> dict[str, Any]:
    return {
        "id": mid, "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason(reason, stop_word), "stop_sequence": stop_word or None,
        "usage": usage_body(usage),
    }


def usage_body(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens}


def sse_event(name: str, data: Mapping[str, Any]) -> str:
    import json

    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"
