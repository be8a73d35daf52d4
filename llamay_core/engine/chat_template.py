"""Chat prompts from the GGUF's `tokenizer.chat_template`, rendered in a sandboxed jinja2.

A GGUF without a template gets its own family's known format, and only when the format's marker
tokens are in its vocabulary; otherwise chat is refused with the reason. Never another family's
format: a model fed markers it was not trained on answers with those markers as text.
"""
from __future__ import annotations

import datetime
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llamay_core.errors import LlamayError, UsageError

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Gemma's turns: roles user and model, no system role (a system message opens the first user turn).
GEMMA = ("{%- set ns = namespace(system='') -%}"
         "{%- for message in messages -%}"
         "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] | trim + '\\n\\n' -%}"
         "{%- else -%}"
         "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
         " + (ns.system if message['role'] == 'user' else '') + message['content'] | trim + '<end_of_turn>\\n' }}"
         "{%- if message['role'] == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}"
         "{%- endif -%}"
         "{%- endfor -%}"
         "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")

# general.architecture -> (the family's own chat format, the marker tokens it needs in the vocabulary)
FAMILY_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemma": (GEMMA, ("<start_of_turn>", "<end_of_turn>")),
    "gemma2": (GEMMA, ("<start_of_turn>", "<end_of_turn>")),
    "gemma3": (GEMMA, ("<start_of_turn>", "<end_of_turn>")),
    "qwen2": (CHATML, ("<|im_start|>", "<|im_end|>")),
}


def _raise(message: str) -> None:
    raise TemplateError(message)


def _is_single_token(model: Any, text: str) -> bool:
    ids = model.tokenizer.encode(text, add_special=False, parse_special=True)
    return len(ids) == 1


def template_source(model: Any) -> str:
    """The jinja source of the model's chat format; a one-line UsageError when there is none."""
    source = model.gguf.metadata.get("tokenizer.chat_template")
    if source:
        return str(source)
    arch = model.gguf.architecture
    known = FAMILY_FORMATS.get(arch)
    if known is None:
        raise UsageError(f"{model.display_name} has no chat template in its GGUF and llamay knows no chat format "
                         f"for {arch!r} models: use it without -chat (plain completion)")
    source, markers = known
    missing = [m for m in markers if not _is_single_token(model, m)]
    if missing:
        raise UsageError(f"{model.display_name} has no chat template in its GGUF, and its vocabulary lacks "
                         f"{', '.join(missing)} that the {arch} chat format needs: use it without -chat")
    return source


def render_chat(model: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt text for `messages` ([{"role", "content"}]) in the model's own chat format."""
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content", ""), str):
            raise UsageError("each message needs a string 'role' and a string 'content'")
    source = template_source(model)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    tok = model.tokenizer
    try:
        template = env.from_string(source)
        return template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
            bos_token=tok.decode([tok.bos_id]) if tok.bos_id is not None and tok.bos_id >= 0 else "",
            eos_token=tok.decode([tok.eos_id]) if tok.eos_id is not None and tok.eos_id >= 0 else "",
        )
    except TemplateError as exc:
        raise LlamayError(f"chat template: {exc}") from None
