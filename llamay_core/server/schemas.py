"""Request bodies, checked field by field: the safe JSON reader, the typed field readers, the
generation settings every endpoint shares, and OpenAI's /v1/completions and /v1/chat/completions.

Anything wrong becomes an `ApiError`, which the app turns into OpenAI's error JSON
(`{"error": {"message", "type", "param", "code"}}`) with a 4xx status. Numbers must be finite,
strings valid Unicode, nesting shallow. Fields that would change the result but that llamay
cannot honour are refused; harmless extras (`user`, `metadata`, ...) are ignored, so the
official clients work unchanged. Schemas and grammars are data, never file names.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping, Sequence

import attrs

from llamay_core.server.engine_api import ConstraintSpec

MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 512  # characters: every token is checked against every stop string's prefixes
MAX_LOGIT_BIAS = 1e6  # keeps biased logits finite
MAX_COMPLETION_LOGPROBS = 5
MAX_CHAT_TOP_LOGPROBS = 20
MAX_N_PROBS = 20
MAX_CHOICES = 16
MAX_BATCH_PROMPTS = 64
MAX_DEPTH = 64  # JSON nesting accepted in a body (schemas rarely pass 10)
SAMPLER_NAMES = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "typical_p", "top_p", "min_p", "xtc",
                 "temperature", "mirostat", "infill")
# llama.cpp's one-letter sampler spellings ("samplers": "kfypmt").
SAMPLER_LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
                   "m": "min_p", "x": "xtc", "t": "temperature"}


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


# -- the body as a whole ------------------------------------------------------------------------
def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; 400 for bad JSON, bad encodings, NaN/Infinity or deep nesting."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"request body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ApiError(400, f"request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    _check_tree(body)
    return body


def _check_tree(root: Any) -> None:
    """Depth and Unicode of every value, without recursion (a deep body cannot overflow the stack here)."""
    stack = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise ApiError(400, f"request body nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                _check_text(key)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "request body has a string with a lone surrogate (not valid Unicode)") from None


# -- typed fields -------------------------------------------------------------------------------
def type_error(param: str, expected: str) -> ApiError:
    return ApiError(400, f"{param} must be {expected}", param=param, code="invalid_type")


def value_error(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param} {message}", param=param, code="invalid_value")


def unsupported(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="unsupported_value")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def optional_int(body: Mapping[str, Any], name: str, minimum: int | None = None,
                 maximum: int | None = None, param: str | None = None) -> int | None:
    value = body.get(name)
    param = param or name
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # 5.0 from clients that send every number as a float
    if not is_int(value):
        raise type_error(param, "an integer")
    if minimum is not None and value < minimum:
        raise value_error(param, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise value_error(param, f"must be <= {maximum}, got {value}")
    return value


def integer(body: Mapping[str, Any], name: str, default: int, minimum: int | None = None,
            maximum: int | None = None) -> int:
    value = optional_int(body, name, minimum=minimum, maximum=maximum)
    return default if value is None else value


def number(body: Mapping[str, Any], name: str, default: float, minimum: float | None = None,
           maximum: float | None = None, above: float | None = None, param: str | None = None) -> float:
    """A finite number in range (`above`: strictly greater than)."""
    value = body.get(name)
    param = param or name
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise type_error(param, "a number")
    if not math.isfinite(value):
        raise value_error(param, f"must be a finite number, got {value}")
    value = float(value)
    if above is not None and value <= above:
        raise value_error(param, f"must be > {above}, got {value}")
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        bounds = f"between {minimum} and {maximum}" if minimum is not None and maximum is not None else (
            f">= {minimum}" if minimum is not None else f"<= {maximum}")
        raise value_error(param, f"must be {bounds}, got {value}")
    return value


def boolean(body: Mapping[str, Any], name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise type_error(param or name, "true or false")
    return value


def text(body: Mapping[str, Any], name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(400, f"{name} is required", param=name, code="missing_field")
        return None
    if not isinstance(value, str):
        raise type_error(name, "a string")
    return value


# -- what every generating endpoint shares ------------------------------------------------------
@attrs.frozen
class Generation:
    """Sampling and stopping settings of one request, already checked."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # None: a random seed
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logit_bias: Mapping[int, float] = attrs.field(factory=dict)
    constraint: ConstraintSpec | None = None


Tokenize = Callable[[str], Sequence[int]]


def parse_generation(body: Mapping[str, Any], n_vocab: int, tokenize: Tokenize, *, temperature: float = 1.0,
                     stop_field: str = "stop") -> Generation:
    """The sampling fields of OpenAI's and llama-server's APIs (the same names in both)."""
    _refuse_samplers_llamay_lacks(body)
    gen = Generation(
        temperature=number(body, "temperature", temperature, minimum=0.0),
        top_k=integer(body, "top_k", 0, minimum=0),
        top_p=number(body, "top_p", 1.0, minimum=0.0, maximum=1.0),
        min_p=number(body, "min_p", 0.0, minimum=0.0, maximum=1.0),
        repeat_penalty=number(body, "repeat_penalty", 1.0, above=0.0),
        repeat_last_n=_repeat_last_n(body),
        presence_penalty=number(body, "presence_penalty", 0.0, minimum=-2.0, maximum=2.0),
        frequency_penalty=number(body, "frequency_penalty", 0.0, minimum=-2.0, maximum=2.0),
        seed=_seed(body),
        stop=_stop(body, stop_field),
        ignore_eos=boolean(body, "ignore_eos", False),
        logit_bias=_logit_bias(body, n_vocab, tokenize),
        constraint=_constraint(body),
    )
    return _apply_samplers(body, gen)


def _refuse_samplers_llamay_lacks(body: Mapping[str, Any]) -> None:
    """llama-server's settings llamay has no sampler for: accepted at the values that switch them
    off (llama-server's clients send every field, at its default), refused at any other, since
    ignoring them would silently give a different answer than the client asked for."""
    floats = {name: number(body, name, default) for name, default in (
        ("typical_p", 1.0), ("typ_p", 1.0), ("dynatemp_range", 0.0), ("dynatemp_exponent", 1.0),
        ("xtc_probability", 0.0), ("xtc_threshold", 0.1), ("dry_multiplier", 0.0), ("dry_base", 1.75),
        ("top_n_sigma", -1.0), ("mirostat_tau", 5.0), ("mirostat_eta", 0.1))}
    ints = {name: integer(body, name, default) for name, default in (
        ("mirostat", 0), ("dry_allowed_length", 2), ("dry_penalty_last_n", -1), ("n_keep", 0), ("n_discard", 0),
        ("n_indent", 0), ("t_max_predict_ms", 0), ("n_cmpl", 1))}
    listed = _sampler_names(body)

    def on(*aliases: str) -> bool:  # a sampler left out of `samplers` is off whatever its settings
        return listed is None or any(a in listed for a in aliases)

    switched_on = (
        ("typical_p", "locally typical sampling", on("typ_p", "typical_p") and floats["typical_p"] < 1.0, "1"),
        ("typ_p", "locally typical sampling", on("typ_p", "typical_p") and floats["typ_p"] < 1.0, "1"),
        ("dynatemp_range", "dynamic temperature", on("temperature") and floats["dynatemp_range"] > 0.0, "0"),
        ("xtc_probability", "XTC sampling",
         on("xtc") and floats["xtc_probability"] > 0.0 and floats["xtc_threshold"] <= 0.5, "0"),
        ("dry_multiplier", "DRY sampling", on("dry") and floats["dry_multiplier"] != 0.0 and floats["dry_base"] >= 1.0
         and ints["dry_penalty_last_n"] != 0, "0"),
        ("top_n_sigma", "top-n-sigma sampling", on("top_n_sigma") and floats["top_n_sigma"] > 0.0, "-1"),
        ("mirostat", "mirostat sampling", ints["mirostat"] != 0, "0"),
        ("t_max_predict_ms", "a time limit on generation", ints["t_max_predict_ms"] > 0, "0"),
        ("n_cmpl", "several completions of one prompt", ints["n_cmpl"] > 1, "1"),
    )
    for name, what, refused, off in switched_on:
        if refused and name in body:
            raise unsupported(name, f"{name}={body[name]} asks for {what}, which llamay does not have; "
                                    f"leave {name} out or at {off}")


def _sampler_names(body: Mapping[str, Any]) -> set[str] | None:
    """The samplers a `samplers` field switches on (names or letters); None when it is absent."""
    value = body.get("samplers")
    if value is None:
        return None
    if isinstance(value, str):
        unknown = [c for c in value if c not in SAMPLER_LETTERS]
        names = {SAMPLER_LETTERS.get(c, c) for c in value}
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        unknown = [v for v in value if v not in SAMPLER_NAMES]
        names = set(value)
    else:
        raise type_error("samplers", "a list of sampler names")
    if unknown:
        raise value_error("samplers", f"has unknown sampler {unknown[0]!r} (known: {', '.join(SAMPLER_NAMES)})")
    return names


def _repeat_last_n(body: Mapping[str, Any]) -> int:
    value = integer(body, "repeat_last_n", 64, minimum=-1)
    return 1 << 30 if value == -1 else value  # -1: the whole context, as llama.cpp


def _seed(body: Mapping[str, Any]) -> int | None:
    """Any integer; -1 (llama.cpp's and many clients' "random") and null pick a random seed."""
    value = optional_int(body, "seed")
    if value is None or value == -1:
        return None
    return value % 2**64  # negative seeds wrap as in llama.cpp's unsigned seed


def _stop(body: Mapping[str, Any], name: str) -> tuple[str, ...]:
    stop = body.get(name)
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise type_error(name, "a string or a list of strings")
    if len(stop) > MAX_STOP_STRINGS:
        raise value_error(name, f"has {len(stop)} strings; at most {MAX_STOP_STRINGS} are allowed")
    if any(len(s) > MAX_STOP_LENGTH for s in stop):
        raise value_error(name, f"has a string longer than {MAX_STOP_LENGTH} characters")
    return tuple(s for s in stop if s)


def _bias_value(value: Any, param: str) -> float:
    if value is False:
        return -math.inf  # llama.cpp: false bans the token
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise type_error(param, "a finite number or false")
    if abs(value) > MAX_LOGIT_BIAS:
        raise value_error(param, f"must be between -{MAX_LOGIT_BIAS:g} and {MAX_LOGIT_BIAS:g} (false bans the token)")
    return float(value)


def _logit_bias(body: Mapping[str, Any], n_vocab: int, tokenize: Tokenize) -> dict[int, float]:
    """OpenAI's {"token id": bias} or llama.cpp's [[id or text, bias], ...]; text biases its tokens."""
    value = body.get("logit_bias")
    if value is None:
        return {}
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        if not all(isinstance(p, list) and len(p) == 2 for p in value):
            raise type_error("logit_bias", "an object of token id -> bias, or a list of [token, bias] pairs")
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise type_error("logit_bias", "an object of token id -> bias, or a list of [token, bias] pairs")
    if len(pairs) > 1024:
        raise value_error("logit_bias", f"has {len(pairs)} entries; at most 1024 are allowed")
    out: dict[int, float] = {}
    for key, raw in pairs:
        bias = _bias_value(raw, f"logit_bias[{key!r}]")
        if is_int(key) or isinstance(key, str) and key.lstrip("-").isdigit() and len(key) < 12:
            ids = [int(key)]
        elif isinstance(key, str):
            ids = list(tokenize(key))  # llama.cpp: a text biases each of its tokens
        else:
            raise type_error("logit_bias", "keyed by token ids or text")
        for token in ids:
            if not 0 <= token < n_vocab:
                raise value_error("logit_bias", f"names token {token}, outside the vocabulary (0..{n_vocab - 1})")
            out[token] = out.get(token, 0.0) + bias
    return out


def _constraint(body: Mapping[str, Any]) -> ConstraintSpec | None:
    """At most one of response_format, json_schema and grammar; each is data, never a path."""
    given = []
    rf = body.get("response_format")
    if rf is not None:
        spec = response_format_constraint(rf)
        if spec is not None:
            given.append(("response_format", spec))
    if body.get("json_schema") is not None:
        given.append(("json_schema", ConstraintSpec("json_schema", schema_data(body["json_schema"], "json_schema"))))
    grammar = body.get("grammar")
    if grammar is not None and grammar != "":
        if not isinstance(grammar, str):
            raise type_error("grammar", "GBNF text")
        given.append(("grammar", ConstraintSpec("grammar", grammar)))
    if len(given) > 1:
        raise unsupported(given[1][0], f"give one of response_format, json_schema and grammar, not "
                                       f"{' and '.join(name for name, _ in given)}")
    return given[0][1] if given else None


def schema_data(value: Any, param: str) -> dict[str, Any]:
    """A JSON schema given as an object, or as JSON text (never read as a file name)."""
    if isinstance(value, str):
        try:
            value = json.loads(value, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            raise type_error(param, "a JSON schema object (or its JSON text)") from None
    if not isinstance(value, dict):
        raise type_error(param, "a JSON schema object")
    return value


def response_format_constraint(rf: Any) -> ConstraintSpec | None:
    """OpenAI's response_format (and llama.cpp's {"type": "json_object", "schema": ...})."""
    if not isinstance(rf, dict):
        raise type_error("response_format", "an object")
    kind = rf.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = rf.get("schema")
        return ConstraintSpec("json_schema", {"type": "object"} if schema is None else
                              schema_data(schema, "response_format.schema"))
    if kind == "json_schema":
        wrapper = rf.get("json_schema")
        if not isinstance(wrapper, dict):
            raise type_error("response_format.json_schema", "an object with a 'schema'")
        schema = wrapper.get("schema", rf.get("schema"))
        if schema is None:
            raise ApiError(400, "response_format.json_schema has no 'schema'", param="response_format.json_schema",
                           code="missing_field")
        return ConstraintSpec("json_schema", schema_data(schema, "response_format.json_schema.schema"))
    raise value_error("response_format.type", f"must be text, json_object or json_schema, got {kind!r}")


def _apply_samplers(body: Mapping[str, Any], gen: Generation) -> Generation:
    """llama.cpp's `samplers`: the order is llama.cpp's own; a sampler left out is switched off."""
    names = _sampler_names(body)
    if names is None:
        return gen
    changes: dict[str, Any] = {}
    if "top_k" not in names:
        changes["top_k"] = 0
    if "top_p" not in names:
        changes["top_p"] = 1.0
    if "min_p" not in names:
        changes["min_p"] = 0.0
    if "penalties" not in names:
        changes.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    return attrs.evolve(gen, **changes)


# -- OpenAI's completions and chat --------------------------------------------------------------
@attrs.frozen
class CompletionRequest:
    """A validated OpenAI request; prompts are still text (or ids) until the app tokenizes them."""

    chat: bool
    prompts: tuple[str | list[int], ...] = ()
    messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None  # None: until the end of text or of the context
    n: int = 1
    gen: Generation = attrs.field(factory=Generation)
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # None: no logprobs; N: the chosen token plus N alternatives
    timings: bool = False  # llama-server's timings_per_token


def check_model(body: Mapping[str, Any], names: Sequence[str], strict: bool) -> str:
    """The name answers carry: the requested one when it is one of the served model's names, else
    the served id. While one model is served any name is served by it, as llama-server does;
    `strict` (-strict-model) answers 404 for unknown names instead."""
    model = body.get("model")
    if model is None:
        return names[0]
    if not isinstance(model, str):
        raise type_error("model", "a string")
    if model in names:
        return model
    if strict:
        raise ApiError(404, f"the model {model!r} does not exist; this server serves {names[0]!r}",
                       type="not_found_error", param="model", code="model_not_found")
    return names[0]


def parse_request(body: dict[str, Any], chat: bool, n_vocab: int, tokenize: Tokenize) -> CompletionRequest:
    """Check an OpenAI completions/chat body; raises ApiError naming the bad field."""
    n = integer(body, "n", 1, minimum=1, maximum=MAX_CHOICES)
    if body.get("echo") not in (None, False):
        raise unsupported("echo", "echo is not supported")
    if body.get("best_of") not in (None, 1, n):
        raise unsupported("best_of", "best_of is not supported")
    if body.get("suffix") not in (None, ""):
        raise unsupported("suffix", "suffix (insertion) is not supported")
    tools = body.get("tools")
    if tools not in (None, []) and body.get("tool_choice") != "none":
        raise unsupported("tools", "tools are not supported by this server")
    if chat:
        messages = parse_messages(body.get("messages"))
        prompts: tuple[str | list[int], ...] = ()
        max_tokens = optional_int(body, "max_completion_tokens", minimum=1)
        if max_tokens is None:
            max_tokens = optional_int(body, "max_tokens", minimum=1)
        logprobs = _chat_logprobs(body)
    else:
        messages = ()
        prompts = parse_prompts(body.get("prompt"), required=True)
        max_tokens = optional_int(body, "max_tokens", minimum=1)
        logprobs = optional_int(body, "logprobs", minimum=0, maximum=MAX_COMPLETION_LOGPROBS)
    if max_tokens is None and body.get("n_predict") is not None:
        # No max_tokens: llama-server's n_predict, else until the end of text or of the context.
        n_predict = integer(body, "n_predict", -1, minimum=-1)
        max_tokens = None if n_predict == -1 else n_predict
    if len(prompts) * n > MAX_BATCH_PROMPTS:
        raise value_error("n", f"asks for {len(prompts) * n} completions; at most {MAX_BATCH_PROMPTS} per request")
    stream = boolean(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise type_error("stream_options", "an object")
    include_usage = boolean(options or {}, "include_usage", False, param="stream_options.include_usage")
    boolean(body, "cache_prompt", True)
    return CompletionRequest(
        chat=chat, prompts=prompts, messages=messages, max_tokens=max_tokens, n=n,
        gen=parse_generation(body, n_vocab, tokenize), stream=stream, include_usage=include_usage,
        logprobs=logprobs, timings=boolean(body, "timings_per_token", False),
    )


def parse_prompts(prompt: Any, required: bool, param: str = "prompt") -> tuple[str | list[int], ...]:
    """One prompt or a batch: a string, token ids, ids mixed with text, or a list of those."""
    if prompt is None:
        if required:
            raise ApiError(400, f"{param} is required", param=param, code="missing_field")
        return ("",)
    if isinstance(prompt, str):
        return (prompt,)
    if isinstance(prompt, list):
        if not prompt:
            raise value_error(param, "is an empty list")
        if all(is_int(t) for t in prompt):
            return (list(prompt),)
        if all(isinstance(p, str) or isinstance(p, list) and all(is_int(t) or isinstance(t, str) for t in p)
               for p in prompt):
            if len(prompt) > MAX_BATCH_PROMPTS:
                raise value_error(param, f"has {len(prompt)} prompts; at most {MAX_BATCH_PROMPTS} are allowed")
            return tuple(p if isinstance(p, str) else list(p) for p in prompt)
        if all(is_int(t) or isinstance(t, str) for t in prompt):
            return (list(prompt),)  # llama.cpp's mixed prompt: ids and text in one sequence
    raise type_error(param, "a string, a list of token ids, or a list of those")


def parse_messages(messages: Any, param: str = "messages") -> tuple[dict[str, Any], ...]:
    if messages is None:
        raise ApiError(400, f"{param} is required", param=param, code="missing_field")
    if not isinstance(messages, list) or not messages:
        raise type_error(param, "a non-empty list of messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise type_error(f"{param}[{i}]", "an object with a string 'role'")
        out.append({"role": m["role"], "content": message_text(m.get("content"), f"{param}[{i}].content")})
    if len(out) > 1 and out[-1]["role"] == out[-2]["role"] == "assistant":
        # A last assistant message is a prefill to continue; two in a row have no meaning.
        raise value_error(param, "ends with two assistant messages; only the last one can be a prefill")
    return tuple(out)


def message_text(content: Any, param: str) -> str:
    """A message's content as text: a string, or OpenAI's/Anthropic's list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise type_error(param, "a string or a list of content parts")
            if part["type"] != "text":
                raise unsupported(param, f"{param}: {part['type']} input is not supported (only text)")
            if not isinstance(part.get("text"), str):
                raise type_error(f"{param}.text", "a string")
            parts.append(part["text"])
        return "".join(parts)
    raise type_error(param, "a string or a list of text parts")


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    wanted = boolean(body, "logprobs", False)
    top = optional_int(body, "top_logprobs", minimum=0, maximum=MAX_CHAT_TOP_LOGPROBS)
    if top is not None and not wanted:
        raise value_error("top_logprobs", "needs logprobs: true")
    return (top or 0) if wanted else None
