"""llama-server's native API: the /completion request and its response shapes, and the small
utility bodies (/tokenize pieces, /props, /slots).

Field names and meanings follow llama-server, so its clients and its own tests read llamay's
answers unchanged.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from llamay_core.server.engine_api import ModelInfo
from llamay_core.server.openai_format import timings_body
from llamay_core.server.scheduler import Finished, TokenLogprob
from llamay_core.server.schemas import (
    MAX_N_PROBS,
    Generation,
    Tokenize,
    boolean,
    integer,
    parse_generation,
    parse_prompts,
    type_error,
)


@attrs.frozen
class NativeRequest:
    prompts: tuple[str | list[int], ...]
    max_tokens: int | None  # None: until the context is full (n_predict -1)
    gen: Generation
    stream: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    return_tokens: bool = False
    timings: bool = False
    response_fields: tuple[str, ...] = ()


def parse_native(body: Mapping[str, Any], n_vocab: int, tokenize: Tokenize) -> NativeRequest:
    """A /completion body (llama-server's defaults: temperature 0.8, n_predict -1)."""
    n_predict = integer(body, "n_predict", -1, minimum=-1)
    if body.get("max_tokens") is not None and body.get("n_predict") is None:
        n_predict = integer(body, "max_tokens", -1, minimum=-1)
    integer(body, "id_slot", -1, minimum=-1)
    boolean(body, "cache_prompt", True)
    boolean(body, "return_progress", False)
    return NativeRequest(
        prompts=parse_prompts(body.get("prompt"), required=True),
        max_tokens=None if n_predict < 0 else n_predict,
        gen=parse_generation(body, n_vocab, tokenize, temperature=0.8),
        stream=boolean(body, "stream", False),
        n_probs=integer(body, "n_probs", 0, minimum=0, maximum=MAX_N_PROBS),
        post_sampling_probs=boolean(body, "post_sampling_probs", False),
        return_tokens=boolean(body, "return_tokens", False),
        timings=boolean(body, "timings_per_token", False),
        response_fields=_response_fields(body),
    )


def _response_fields(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("response_fields")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise type_error("response_fields", "a list of field names")
    return tuple(value)


def pick_fields(body: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """llama-server's `response_fields`: only these, a "/" reaching into objects ("generation_settings/n_predict")."""
    if not fields:
        return body
    out = {}
    for field in fields:
        value: Any = body
        for key in field.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            out[field] = value
    return out


def generation_settings(gen: Generation, n_ctx: int, max_tokens: int | None, model: str) -> dict[str, Any]:
    return {
        "n_ctx": n_ctx, "n_predict": -1 if max_tokens is None else max_tokens, "model": model,
        "seed": -1 if gen.seed is None else gen.seed, "temperature": gen.temperature, "top_k": gen.top_k,
        "top_p": gen.top_p, "min_p": gen.min_p, "repeat_penalty": gen.repeat_penalty,
        "repeat_last_n": gen.repeat_last_n, "presence_penalty": gen.presence_penalty,
        "frequency_penalty": gen.frequency_penalty, "stop": list(gen.stop), "ignore_eos": gen.ignore_eos,
        "logit_bias": [[t, b if math.isfinite(b) else False] for t, b in gen.logit_bias.items()],
        "grammar": gen.constraint.source if gen.constraint is not None and gen.constraint.kind == "grammar" else "",
        "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
    }


def probs_body(items: list[TokenLogprob], ids: list[int], post_sampling: bool) -> list[dict[str, Any]]:
    """`completion_probabilities`: per token its id, text, bytes and logprob (or prob) and the top ones."""
    out = []
    for token_id, item in zip(ids, items):
        if post_sampling:
            out.append({"id": token_id, "token": item.token, "bytes": item.bytes, "prob": math.exp(item.logprob),
                        "top_probs": [{"id": i, "token": t, "bytes": b, "prob": math.exp(lp)}
                                      for (t, b, lp), i in zip(item.top, item.top_ids)]})
        else:
            out.append({"id": token_id, "token": item.token, "bytes": item.bytes, "logprob": item.logprob,
                        "top_logprobs": [{"id": i, "token": t, "bytes": b, "logprob": lp}
                                         for (t, b, lp), i in zip(item.top, item.top_ids)]})
    return out


def partial_body(index: int, text: str, tokens: list[int], req: NativeRequest,
                 probs: list[dict[str, Any]] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"index": index, "content": text, "tokens": tokens, "stop": False, "id_slot": -1}
    if probs is not None:
        body["completion_probabilities"] = probs
    return body


def final_body(index: int, text: str, tokens: list[int], prompt_text: str, req: NativeRequest, end: Finished,
               model: str, n_ctx: int, probs: list[dict[str, Any]] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "index": index, "content": text, "tokens": tokens if req.return_tokens else [], "id_slot": 0,
        "stop": True, "model": model, "tokens_predicted": end.usage.completion_tokens,
        "tokens_evaluated": end.usage.prompt_tokens,
        "generation_settings": generation_settings(req.gen, n_ctx, req.max_tokens, model),
        "prompt": prompt_text, "has_new_line": "\n" in text, "truncated": end.truncated,
        "stop_type": end.stop_type, "stopping_word": end.stop_word,
        "tokens_cached": end.usage.prompt_tokens + end.usage.completion_tokens,
        "timings": timings_body(end.timings),
    }
    if probs is not None:
        body["completion_probabilities"] = probs
    return body


def token_pieces(ids: list[int], token_bytes: Any) -> list[dict[str, Any]]:
    """/tokenize with_pieces: a piece is its text when valid UTF-8, else its bytes."""
    out = []
    for i in ids:
        raw = token_bytes(i)
        try:
            piece: Any = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        out.append({"id": i, "piece": piece})
    return out


def props_body(info: ModelInfo, build: str) -> dict[str, Any]:
    from llamay_core.server.schemas import Generation

    settings = generation_settings(Generation(temperature=0.8), info.n_ctx, None, info.names[0])
    return {
        "default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": info.n_ctx, "speculative": False,
                                        "is_processing": False, "params": settings},
        "total_slots": info.total_slots, "model_alias": info.names[0], "model_path": info.path,
        "modalities": {"vision": False, "audio": False}, "chat_template": info.chat_template,
        "bos_token": info.bos_token, "eos_token": info.eos_token, "build_info": build,
    }
