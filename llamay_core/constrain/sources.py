"""Where constraints come from: `-json-schema FILE|JSON`, `-grammar TEXT`, `-grammar-file FILE`, `-regex RE`, the
API's json_schema=/grammar=/regex=, and OpenAI's `response_format` on the server."""
from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from llamay_core.constrain.engines import Constraint, Grammar, compile_grammar
from llamay_core.errors import UsageError

if TYPE_CHECKING:
    from llamay_core.engine.model import Model

_CACHE_SIZE = 32  # compiled grammars kept per tokenizer: a server sees the same schemas again
_compiled: "weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, str], Grammar]]" = weakref.WeakKeyDictionary()


def read_json_schema(value: Any) -> dict:
    """A schema from a dict, JSON text, or the path of a JSON file."""
    if isinstance(value, dict):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"a JSON schema must be an object, JSON text or a file, got {type(value).__name__}")
    text = os.fspath(value)
    if not text.lstrip().startswith("{"):
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read JSON schema file {value}: {exc.strerror}") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"JSON schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(schema, dict):
        raise UsageError("a JSON schema must be a JSON object")
    return schema


def read_grammar_file(path: str | os.PathLike[str]) -> str:
    """The text of a GBNF (or Lark) grammar file."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read grammar file {path}: {exc.strerror}") from None


def grammar_for(model: "Model", kind: str, source: str | dict) -> Grammar:
    """The compiled grammar for `source` on this model's tokenizer (cached)."""
    key = (kind, json.dumps(source, sort_keys=True) if isinstance(source, dict) else source)
    per_tokenizer = _compiled.setdefault(model.tokenizer, OrderedDict())
    grammar = per_tokenizer.get(key)
    if grammar is None:
        grammar = compile_grammar(model.tokenizer, kind, source)
        per_tokenizer[key] = grammar
        if len(per_tokenizer) > _CACHE_SIZE:
            per_tokenizer.popitem(last=False)
    else:
        per_tokenizer.move_to_end(key)
    return grammar


def constraint_from_options(model: "Model", *, json_schema: Any = None, grammar: str | None = None,
                            regex: str | None = None) -> Constraint | None:
    """A Constraint from at most one of json_schema (dict, JSON text or file), grammar (GBNF or
    Lark text) and regex; None when none is given."""
    given = [name for name, v in (("json_schema", json_schema), ("grammar", grammar), ("regex", regex)) if v is not None]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(f"give one constraint, not {' and '.join(given)}")
    if json_schema is not None:
        return grammar_for(model, "json_schema", read_json_schema(json_schema)).start()
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise UsageError("a grammar must be non-empty GBNF or Lark text")
        return grammar_for(model, "grammar", grammar).start()
    if not isinstance(regex, str) or not regex:
        raise UsageError("a regex must be a non-empty string")
    return grammar_for(model, "regex", regex).start()


def constraint_from_response_format(model: "Model", response_format: Any) -> Constraint | None:
    """OpenAI's `response_format` as a Constraint: {"type": "text"} (or None) gives None,
    {"type": "json_object"} any JSON object, {"type": "json_schema", "json_schema": {"schema":
    {...}}} that schema. llama.cpp's {"type": "json_object", "schema": {...}} is read too.
    Raises UsageError (HTTP 400) with a one-line message for anything else."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise UsageError("response_format must be an object")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema") or {"type": "object"}
        return constraint_from_options(model, json_schema=read_json_schema(schema))
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        if not isinstance(wrapper, dict):
            raise UsageError("response_format.json_schema must be an object with a 'schema'")
        schema = wrapper.get("schema")
        if schema is None:
            raise UsageError("response_format.json_schema has no 'schema'")
        return constraint_from_options(model, json_schema=read_json_schema(schema))
    raise UsageError(f"response_format.type must be text, json_object or json_schema, got {kind!r}")
