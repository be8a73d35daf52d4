"""The JSON shapes OpenAI's API answers with: whole responses, stream chunks, usage and logprobs
(plus llama-server's `timings`, which it adds to them)."""
from __future__ import annotations

from typing import Any

from llamay_core.server.scheduler import Timings, TokenLogprob, Usage
from llamay_core.version import __version__

# llama-server's fingerprint is its build ("b1234"); clients and its tests expect the "b".
SYSTEM_FINGERPRINT = f"b{__version__}-llamay"


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


class LogprobsBuilder:
    """Collects per-token logprobs in the completion (`tokens`, `token_logprobs`, ...) or chat shape."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.offset = 0  # characters of text before the next token, for `text_offset`

    def shape(self, items: list[TokenLogprob]) -> dict[str, Any]:
        if self.chat:
            return {"content": [
                {"token": t.token, "logprob": t.logprob, "bytes": t.bytes,
                 "top_logprobs": [{"token": s, "logprob": lp, "bytes": b} for s, b, lp in t.top]}
                for t in items]}
        offsets = []
        for t in items:
            offsets.append(self.offset)
            self.offset += len(t.token)
        return {
            "tokens": [t.token for t in items],
            "token_logprobs": [t.logprob for t in items],
            "top_logprobs": [_by_text(t.top) for t in items],
            "text_offset": offsets,
        }


def _by_text(top: list[tuple[str, list[int], float]]) -> dict[str, float]:
    """OpenAI's completion shape keys alternatives by text; tokens sharing a text keep the likeliest."""
    out: dict[str, float] = {}
    for text, _, logprob in top:
        out.setdefault(text, logprob)
    return out


def timings_body(t: Timings) -> dict[str, Any]:
    """llama-server's `timings` object."""
    return {
        "cache_n": t.cache_n,
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": t.prompt_ms / t.prompt_n if t.prompt_n else 0.0,
        "prompt_per_second": t.prompt_n / t.prompt_ms * 1e3 if t.prompt_ms else 0.0,
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "predicted_per_token_ms": t.predicted_ms / t.predicted_n if t.predicted_n else 0.0,
        "predicted_per_second": t.predicted_n / t.predicted_ms * 1e3 if t.predicted_ms else 0.0,
    }


def choice_body(index: int, chat: bool, text: str, finish_reason: str,
                logprobs: dict[str, Any] | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": finish_reason}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return choice


def completion_body(rid: str, created: int, model: str, chat: bool, choices: list[dict[str, Any]],
                    usage: Usage, timings: Timings | None = None) -> dict[str, Any]:
    body = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices, "usage": usage_body(usage)}
    if timings is not None:
        body["timings"] = timings_body(timings)
    return body


def chunk_body(rid: str, created: int, model: str, chat: bool, *, index: int = 0, text: str | None = None,
               role: bool = False, finish_reason: str | None = None,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One stream chunk. Chat chunks carry a `delta`; the first one announces the role (with null
    content, as llama-server sends it)."""
    choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": finish_reason}
    if chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
            delta["content"] = None
        elif text is not None:
            delta["content"] = text
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
            "model": model, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [choice]}


def usage_chunk(rid: str, created: int, model: str, chat: bool, usage: Usage) -> dict[str, Any]:
    """The last chunk when `stream_options.include_usage`: no choices, just usage."""
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
            "model": model, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [], "usage": usage_body(usage)}
